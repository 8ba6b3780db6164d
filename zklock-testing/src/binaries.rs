//! Finding a server binary: the path an environment variable names, Debian's path, or `PATH`.

use std::path::{Path, PathBuf};

/// `$env` when set (it must name a file), else `debian` when it is a file, else `name` on
/// `PATH`. `Err` lists the places looked at, for the caller's "not installed" error.
pub(crate) fn find_binary(env: &str, debian: &str, name: &str) -> Result<PathBuf, String> {
    if let Some(explicit) = std::env::var_os(env) {
        let path = PathBuf::from(explicit);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{env}={}", path.display()))
        };
    }
    let mut searched = vec![debian.to_string()];
    if Path::new(debian).is_file() {
        return Ok(PathBuf::from(debian));
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        searched.push(candidate.display().to_string());
    }
    Err(searched.join(", "))
}
