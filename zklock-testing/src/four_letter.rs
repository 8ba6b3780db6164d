//! ZooKeeper's four-letter-word admin commands (`ruok`, `srvr`, `mntr`, `wchs`, ...) over a plain
//! TCP connection: send the four bytes, read until the server closes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::error::TestingError;

/// Sends `word` to the server at `addr` and returns its whole answer.
pub(crate) fn four_letter_word(addr: SocketAddr, word: &str, timeout: Duration) -> Result<String, TestingError> {
    if word.len() != 4 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(TestingError::InvalidArgument(format!(
            "{word:?} is not a four-letter word (four lowercase ASCII letters, e.g. \"ruok\")"
        )));
    }
    let context = || format!("four-letter word {word:?} to {addr}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| TestingError::io(context(), e))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| TestingError::io(context(), e))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| TestingError::io(context(), e))?;
    stream
        .write_all(word.as_bytes())
        .map_err(|e| TestingError::io(context(), e))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| TestingError::io(context(), e))?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The `Mode:` line of a `srvr` answer: "standalone", "leader", "follower", "observer".
pub(crate) fn mode_of(srvr: &str) -> Option<&str> {
    srvr.lines().find_map(|line| line.strip_prefix("Mode:")).map(str::trim)
}
