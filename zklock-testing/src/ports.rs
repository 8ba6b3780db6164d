//! Free loopback ports for test servers.
//!
//! Ports come from 20000..32000, below Linux's ephemeral range (32768..60999) so that outgoing
//! client connections, which take ephemeral ports, never hold a port a server is about to bind.
//! Each process walks the range from a pid-derived offset, and every candidate is bind-checked;
//! a server that still loses a race to another process is restarted on fresh ports by its caller.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

use super::error::TestingError;

const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A port on 127.0.0.1 that nothing was listening on a moment ago, and that this process has not
/// handed out before (until the range wraps).
pub(crate) fn free_port() -> Result<u16, TestingError> {
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(7919)) % COUNT,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..COUNT {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        let port = (FIRST + offset) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(TestingError::io(
        "find a free loopback port",
        std::io::Error::new(std::io::ErrorKind::AddrInUse, "every port in 20000..32000 is taken"),
    ))
}
