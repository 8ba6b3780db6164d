//! Every misuse of `#[distributed_lock]` is a compile error pointing at the mistake; the
//! expected messages and spans are checked in `tests/ui/*.stderr`. (The shapes that must
//! compile are `tests/pass/`, a test target of their own: with compile-fail cases only,
//! trybuild checks rather than builds.)
//!
//! The last test here checks the one misuse trybuild cannot show.
//!
//! The cases live in this crate, not in the facade's tests, because trybuild builds them in a
//! project of their own whose dependencies are this crate's dev-dependencies: here that is
//! zklock without features, not the facade's test support with TLS certificates and exporters.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn misuse_is_a_compile_error_at_the_offending_token() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

const WORKSPACE_MANIFEST: &str = "[workspace]\nmembers = [\"platform\", \"app\"]\nresolver = \"2\"\n";

/// A crate that reaches the attribute through a re-export: it does not list zklock itself.
const PLATFORM_MANIFEST: &str = r#"
[package]
name = "platform"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
zklock-macros = { path = "@MACROS@" }
"#;
const PLATFORM_LIB: &str = "pub mod zklock {\n    pub use zklock_macros::distributed_lock;\n}\n";

const APP_MANIFEST: &str = r#"
[package]
name = "app"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
platform = { path = "../platform" }
"#;
const APP_LIB: &str = r#"pub struct LockError;

#[platform::zklock::distributed_lock("jobs:{id}", timeout = "1s")]
pub async fn run(id: u32) -> Result<u32, LockError> {
    Ok(id)
}
"#;

/// The one misuse trybuild cannot show: its test crate always depends on zklock, and the
/// attribute finds zklock in the `Cargo.toml` of the crate being compiled. So this builds a
/// two-crate workspace of its own, an app that reaches the attribute only through a
/// `platform` crate, and checks the single error names the `crate = …` option.
#[test]
fn a_crate_without_zklock_in_its_manifest_is_told_about_the_crate_option() {
    let macros = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("not_a_dependency");
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("Cargo.toml", WORKSPACE_MANIFEST);
    write(
        "platform/Cargo.toml",
        &PLATFORM_MANIFEST.replace("@MACROS@", &macros.display().to_string()),
    );
    write("platform/src/lib.rs", PLATFORM_LIB);
    write("app/Cargo.toml", APP_MANIFEST);
    write("app/src/lib.rs", APP_LIB);
    // The repository's lock file pins the versions already built and downloaded.
    std::fs::copy(macros.join("../Cargo.lock"), dir.join("Cargo.lock")).unwrap();

    // A check of two small crates and the macro's dependencies, from an empty target directory:
    // about a minute on a loaded 2-core machine; ten mean cargo hangs (a lock on its caches).
    // Its messages go to a file, so a long output cannot fill a pipe nobody reads yet.
    let log_path = dir.join("check.log");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut check = Command::new(cargo)
        .args(["check", "--quiet", "--offline", "--color", "never", "-p", "app"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("cargo starts");
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(status) = check.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = check.kill();
            let _ = check.wait();
            panic!("cargo check of the app did not finish in 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&log_path).unwrap();
    assert!(!status.success(), "the app compiled:\n{stderr}");

    let line = APP_LIB.lines().position(|l| l.starts_with("#[platform")).unwrap() + 1;
    let expected = format!(
        "error: zklock is not a dependency of this crate; if you reach zklock through a re-export, \
         name it with `crate = \"path::to::zklock\"`, otherwise add zklock to [dependencies]\n \
         --> app/src/lib.rs:{line}:1\n"
    );
    assert!(stderr.contains(&expected), "expected\n{expected}in\n{stderr}");
    // No "unresolved import `zklock`" or other errors after it.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 2, "{stderr}");
    assert!(errors[1].starts_with("error: could not compile `app`"), "{stderr}");
}
