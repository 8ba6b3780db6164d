//! A fault-injecting TCP proxy to put between a ZooKeeper client and a server: [`FaultProxy`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::error::TestingError;

/// How often blocked pumps look at the proxy's switches.
const POLL: Duration = Duration::from_millis(50);
/// Bound on connecting to the upstream server.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on [`FaultProxy::reset_all`] waiting for the connections to be gone.
const RESET_WAIT: Duration = Duration::from_secs(2);

/// Rewrites the first message of each connection, client to server. Called with everything the
/// client sent so far; returns `None` while it needs more bytes, then the bytes to forward in
/// their place. After 64 KiB without an answer the bytes pass unchanged.
#[derive(Clone)]
pub(crate) struct FirstMessage(pub(crate) Arc<RewriteFn>);

/// The function inside a [`FirstMessage`].
pub(crate) type RewriteFn = dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync;

impl std::fmt::Debug for FirstMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstMessage(..)")
    }
}

/// The most a [`FirstMessage`] rewrite may hold back.
const FIRST_MESSAGE_LIMIT: usize = 64 * 1024;

/// What a [`FaultProxy`] does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyMode {
    /// Forward bytes both ways (after the configured latency).
    Pass,
    /// Keep connections open and accept new ones, but silently drop every byte both ways, as a
    /// network partition would. A connection that lost bytes is corrupt: when traffic passes
    /// again it is closed with a reset, and the client reconnects.
    Blackhole,
}

impl ProxyMode {
    fn from_u8(value: u8) -> ProxyMode {
        match value {
            1 => ProxyMode::Blackhole,
            _ => ProxyMode::Pass,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            ProxyMode::Pass => 0,
            ProxyMode::Blackhole => 1,
        }
    }
}

/// A TCP proxy on a loopback port that forwards to one upstream address and can be switched at
/// runtime to drop traffic ([`blackhole`](Self::blackhole)), reset every connection
/// ([`reset_all`](Self::reset_all)) or add latency ([`set_latency`](Self::set_latency)).
///
/// It runs on plain threads (one acceptor, two pumps per connection), so it needs no async
/// runtime. Dropping it closes every connection and joins its threads.
///
/// ```no_run
/// use std::time::Duration;
/// use zklock_testing::{FaultProxy, ProxyMode, ZkServer};
///
/// let server = ZkServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// let connect = proxy.connect_string(); // give this to the client under test
/// # let _ = connect;
/// proxy.blackhole(); // partition: the client's session will expire
/// assert_eq!(proxy.mode(), ProxyMode::Blackhole);
/// proxy.pass(); // heal
/// proxy.set_latency(Duration::from_millis(50));
/// proxy.reset_all(); // every open connection gets an RST
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    /// How long a refused upstream connect is retried.
    patience: Duration,
    /// Rewrites the start of what each client sends.
    rewrite: Option<FirstMessage>,
    mode: AtomicU8,
    latency_micros: AtomicU64,
    shutdown: AtomicBool,
    next_id: AtomicU64,
    accepted: AtomicU64,
    connections: Mutex<HashMap<u64, Weak<Connection>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// One proxied connection: the client's socket and ours to the server. Both pumps hold it; when
/// the last one exits the sockets close (with an RST if `reset` was asked for).
#[derive(Debug)]
struct Connection {
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    /// Set when the connection should go away; pumps notice within [`POLL`].
    closing: AtomicBool,
    /// Set when bytes were dropped: the stream is no longer what the peers sent.
    tainted: AtomicBool,
    shared: Weak<Shared>,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to `upstream`, in
    /// [`ProxyMode::Pass`] with no latency.
    pub fn start(upstream: SocketAddr) -> Result<FaultProxy, TestingError> {
        FaultProxy::start_with(upstream, Duration::ZERO, None)
    }

    /// Like [`start`](Self::start), with two tools for proxying between servers:
    ///
    /// - a connection whose upstream refuses is retried for up to `patience` before the client is
    ///   reset. A proxy always accepts first, so without this a peer that dials a server a moment
    ///   before it listens (a follower dialing the leader it just elected) would see a reset
    ///   handshake, which it treats as a failed leader, instead of the refused connect it retries;
    /// - `rewrite` may replace the first bytes a client sends (see [`FirstMessage`]).
    pub(crate) fn start_with(
        upstream: SocketAddr,
        patience: Duration,
        rewrite: Option<FirstMessage>,
    ) -> Result<FaultProxy, TestingError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| TestingError::io("bind the fault proxy's port", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestingError::io("read the fault proxy's address", e))?;
        let shared = Arc::new(Shared {
            upstream,
            patience,
            rewrite,
            mode: AtomicU8::new(ProxyMode::Pass.as_u8()),
            latency_micros: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
        });
        let acceptor_shared = shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("fault-proxy-accept-{}", addr.port()))
            .spawn(move || accept_loop(listener, acceptor_shared))
            .map_err(|e| TestingError::io("spawn the fault proxy's acceptor thread", e))?;
        Ok(FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The proxy's own address; clients connect here.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's address as a ZooKeeper connect string, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        ProxyMode::from_u8(self.shared.mode.load(Ordering::SeqCst))
    }

    /// Switches the mode; applies to open and new connections at once. Switching to
    /// [`ProxyMode::Pass`] resets the connections that lost bytes while traffic was dropped.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.shared.mode.store(mode.as_u8(), Ordering::SeqCst);
        if mode == ProxyMode::Pass {
            for connection in self.shared.live_connections() {
                if connection.tainted.load(Ordering::SeqCst) {
                    connection.close(true);
                }
            }
        }
    }

    /// Forwards traffic again ([`ProxyMode::Pass`]).
    pub fn pass(&self) {
        self.set_mode(ProxyMode::Pass);
    }

    /// Drops all traffic both ways, keeping connections open ([`ProxyMode::Blackhole`]).
    pub fn blackhole(&self) {
        self.set_mode(ProxyMode::Blackhole);
    }

    /// Delays every forwarded chunk, in both directions, by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_micros.store(micros, Ordering::SeqCst);
    }

    /// The configured latency.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.shared.latency_micros.load(Ordering::SeqCst))
    }

    /// Closes every open connection with a TCP reset (SO_LINGER 0) on both sides, and keeps
    /// accepting new ones. Returns once those connections are closed (bounded by 2 s).
    pub fn reset_all(&self) {
        let victims = self.shared.live_connections();
        for connection in &victims {
            connection.close(true);
        }
        let ids: Vec<u64> = victims.iter().map(|c| c.id).collect();
        drop(victims);
        let deadline = Instant::now() + RESET_WAIT;
        while Instant::now() < deadline {
            let connections = self.shared.connections();
            if !ids.iter().any(|id| connections.contains_key(id)) {
                return;
            }
            drop(connections);
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The number of connections currently open through the proxy.
    pub fn connection_count(&self) -> usize {
        self.shared.live_connections().len()
    }

    /// The number of connections accepted since the proxy started.
    pub fn accepted_count(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the acceptor out of accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for connection in self.shared.live_connections() {
            connection.close(false);
        }
        let threads = std::mem::take(&mut *self.shared.threads());
        for handle in threads {
            let _ = handle.join();
        }
    }
}

impl Shared {
    fn connections(&self) -> MutexGuard<'_, HashMap<u64, Weak<Connection>>> {
        self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn threads(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn live_connections(&self) -> Vec<Arc<Connection>> {
        self.connections().values().filter_map(Weak::upgrade).collect()
    }

    fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    fn mode(&self) -> ProxyMode {
        ProxyMode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_micros.load(Ordering::SeqCst))
    }

    fn spawn(self: &Arc<Self>, name: String, f: impl FnOnce() + Send + 'static) {
        match thread::Builder::new().name(name).spawn(f) {
            Ok(handle) => {
                let mut threads = self.threads();
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
            }
            Err(e) => tracing::warn!("fault proxy: cannot spawn a thread: {e}"),
        }
    }
}

impl Connection {
    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || !matches!(self.shared.upgrade(), Some(s) if !s.is_shutdown())
    }

    /// Asks both pumps to stop; with `reset`, the sockets will close with an RST.
    fn close(&self, reset: bool) {
        if reset {
            set_linger_zero(&self.client);
            set_linger_zero(&self.upstream);
        }
        self.closing.store(true, Ordering::SeqCst);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.connections().remove(&self.id);
        }
    }
}

fn set_linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized `linger` value.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.is_shutdown() {
            return;
        }
        match accepted {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                let setup_shared = shared.clone();
                shared.spawn(format!("fault-proxy-conn-{id}"), move || {
                    open_connection(id, client, setup_shared)
                });
            }
            Err(e) => {
                tracing::debug!("fault proxy: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Connects to the upstream server and pumps both directions; runs on its own thread.
fn open_connection(id: u64, client: TcpStream, shared: Arc<Shared>) {
    let started = Instant::now();
    let connected = loop {
        match TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT) {
            Err(e)
                if e.kind() == io::ErrorKind::ConnectionRefused
                    && started.elapsed() < shared.patience
                    && !shared.is_shutdown() =>
            {
                thread::sleep(POLL)
            }
            result => break result,
        }
    };
    let upstream = match connected {
        Ok(upstream) => upstream,
        Err(e) => {
            tracing::debug!("fault proxy: upstream {} unreachable: {e}", shared.upstream);
            // Tell the client the way a refused connection would.
            set_linger_zero(&client);
            return;
        }
    };
    for stream in [&client, &upstream] {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(POLL));
        let _ = stream.set_write_timeout(Some(POLL));
    }
    let connection = Arc::new(Connection {
        id,
        client,
        upstream,
        closing: AtomicBool::new(false),
        tainted: AtomicBool::new(false),
        shared: Arc::downgrade(&shared),
    });
    shared.connections().insert(id, Arc::downgrade(&connection));
    if shared.is_shutdown() {
        return;
    }
    let back = connection.clone();
    let back_shared = shared.clone();
    shared.spawn(format!("fault-proxy-down-{id}"), move || {
        pump(&back, Direction::ToClient, &back_shared)
    });
    pump(&connection, Direction::ToServer, &shared);
}

#[derive(Debug, Clone, Copy)]
enum Direction {
    ToServer,
    ToClient,
}

/// Copies one direction of a connection, applying the proxy's mode and latency to every chunk.
fn pump(connection: &Connection, direction: Direction, shared: &Shared) {
    let (mut from, mut to) = match direction {
        Direction::ToServer => (&connection.client, &connection.upstream),
        Direction::ToClient => (&connection.upstream, &connection.client),
    };
    let mut buffer = vec![0u8; 16 * 1024];
    // The client's first bytes, held back until the rewrite has what it needs.
    let mut first = match direction {
        Direction::ToServer => shared.rewrite.clone().map(|rewrite| (rewrite, Vec::new())),
        Direction::ToClient => None,
    };
    loop {
        if connection.is_closing() {
            return;
        }
        let n = match from.read(&mut buffer) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) => continue,
            Err(_) => {
                connection.close(true);
                return;
            }
        };
        let mode = shared.mode();
        if n == 0 {
            // End of stream. Forward the half-close, unless the network is "down": then the
            // other side must not learn of it.
            if mode == ProxyMode::Pass && !connection.tainted.load(Ordering::SeqCst) {
                let _ = to.shutdown(Shutdown::Write);
            } else {
                connection.tainted.store(true, Ordering::SeqCst);
            }
            return;
        }
        match mode {
            ProxyMode::Blackhole => {
                connection.tainted.store(true, Ordering::SeqCst);
            }
            ProxyMode::Pass => {
                if connection.tainted.load(Ordering::SeqCst) {
                    connection.close(true);
                    return;
                }
                let rewritten;
                let bytes = match first.as_mut() {
                    None => &buffer[..n],
                    Some((rewrite, held)) => {
                        held.extend_from_slice(&buffer[..n]);
                        rewritten = match (rewrite.0)(held) {
                            Some(bytes) => bytes,
                            None if held.len() < FIRST_MESSAGE_LIMIT => continue,
                            None => std::mem::take(held),
                        };
                        first = None;
                        &rewritten[..]
                    }
                };
                let latency = shared.latency();
                if !latency.is_zero() && !sleep_unless_closing(connection, latency) {
                    return;
                }
                if write_all_unless_closing(connection, &mut to, bytes).is_err() {
                    connection.close(true);
                    return;
                }
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sleeps `duration`; returns false (early) if the connection is closing.
fn sleep_unless_closing(connection: &Connection, duration: Duration) -> bool {
    let deadline = Instant::now() + duration;
    loop {
        if connection.is_closing() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        thread::sleep((deadline - now).min(Duration::from_millis(10)));
    }
}

fn write_all_unless_closing(connection: &Connection, to: &mut &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        if connection.is_closing() {
            return Err(io::Error::other("connection closing"));
        }
        match to.write(bytes) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
