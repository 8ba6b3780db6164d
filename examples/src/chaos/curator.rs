//! A Curator contender: Apache Curator's `InterProcessMutex` (through `zklock::testing`'s
//! Curator peer, a JVM) taking the main lock in a loop beside the zklock processes, with short
//! sections and pauses between them. It is the contender of another library that a zklock
//! process keeping the lock idle in its cache must notice and give the node up to, under the
//! faults of the run.
//!
//! Its sections go into the history like the zklock tasks' (client `curator`, the process
//! index after theirs), with its node's creation zxid as the token: Curator has no token of its
//! own, but the zxid orders its nodes with zklock's in the one queue. It claims the fenced
//! register with that token when granted and writes again when its work ends, so a zklock
//! holder that went on past a loss is fenced off by Curator's claim as by any other holder's,
//! and one granted beside Curator is an overlap the checker finds.
//!
//! Curator tells a holder nothing of a lost session, so its sections are kept short (5–25 ms,
//! far below the session timeout, which the server counts from the last request): no fault can
//! expire its session in the middle of one. The runner idles it around the faults that act on
//! whoever holds the lock's first node (a delete, a revocation) and around the reap, which
//! needs an empty directory.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use zklock::testing::curator::{CuratorPeer, PeerError};
use zklock::zk;

use super::clock::now_ns;
use super::history::{Part, Section, Token, LOCK};
use super::register;

/// The peer's id for the main lock.
const ID: &str = "main";
/// The client name of its sections and register writes.
pub const CLIENT: &str = "curator";
/// Curator's own bound on one acquisition: long enough to get through the zklock processes'
/// chains of local handoffs ahead of it (up to 16 holds each) on a loaded machine, short enough
/// that idling (which waits for an outstanding acquisition to end) is prompt.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// The bound on the peer's answer to one acquisition, beyond Curator's own timeout: Curator
/// retries its requests through a connection loss before it gives up.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// What the runner asks of the contender.
#[derive(Debug, Default)]
struct Wanted {
    idle: bool,
    stop: bool,
    /// Set by the contender while it has neither a section nor an acquisition outstanding and
    /// is idle.
    quiet: bool,
}

#[derive(Debug, Default)]
struct Control {
    wanted: Mutex<Wanted>,
    changed: Condvar,
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, Wanted> {
        self.wanted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running Curator contender; stop it with [`stop`](Self::stop) (dropping it stops it too).
#[derive(Debug)]
pub struct CuratorContender {
    control: Arc<Control>,
    thread: Option<JoinHandle<Result<usize, String>>>,
}

impl CuratorContender {
    /// Starts the peer on `connect` (its session times out after `session_timeout`) and its
    /// loop on the lock directory `dir`; each section it completes goes to `record`. Returns
    /// once the peer is connected and the mutex made.
    pub fn start(
        connect: &str,
        dir: &str,
        register: SocketAddr,
        session_timeout: Duration,
        process: usize,
        seed: u64,
        record: impl Fn(Section) + Send + 'static,
    ) -> Result<CuratorContender, String> {
        let control = Arc::new(Control::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (connect, dir) = (connect.to_owned(), dir.to_owned());
        let thread = {
            let control = control.clone();
            thread::Builder::new()
                .name("chaos-curator".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    rt.block_on(async move {
                        let started = async {
                            let peer = CuratorPeer::start_with(&connect, session_timeout).await?;
                            peer.mutex(ID, &dir).await?;
                            Ok::<_, PeerError>(peer)
                        };
                        let peer = match started.await {
                            Ok(started) => {
                                let _ = ready_tx.send(Ok(()));
                                started
                            }
                            Err(err) => {
                                let _ = ready_tx.send(Err(err.to_string()));
                                return Err(err.to_string());
                            }
                        };
                        let mut contender = Loop {
                            control: &control,
                            peer: &peer,
                            connect: &connect,
                            session_timeout,
                            raw: None,
                            dir: &dir,
                            register: register::Writer::new(register.to_string()),
                            process,
                            rng: seed | 1,
                        };
                        contender.run(&record).await
                    })
                })
                .map_err(|e| e.to_string())?
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(CuratorContender {
                control,
                thread: Some(thread),
            }),
            Ok(Err(err)) => Err(format!("the Curator contender did not start: {err}")),
            Err(_) => Err(format!("the Curator contender did not start: {:?}", thread.join())),
        }
    }

    /// Stops acquiring; returns whether, within `within`, the contender got to hold nothing
    /// and wait for nothing (its current section and acquisition ended and were released).
    pub fn idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut wanted = self.control.lock();
        wanted.idle = true;
        self.control.changed.notify_all();
        while !wanted.quiet {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            wanted = self
                .control
                .changed
                .wait_timeout(wanted, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Acquires again after [`idle`](Self::idle).
    pub fn go(&self) {
        let mut wanted = self.control.lock();
        (wanted.idle, wanted.quiet) = (false, false);
        self.control.changed.notify_all();
    }

    /// Stops the loop once its current section or acquisition ended, and the peer; the number
    /// of sections it completed.
    pub fn stop(mut self) -> Result<usize, String> {
        self.finish()
    }

    fn finish(&mut self) -> Result<usize, String> {
        {
            let mut wanted = self.control.lock();
            wanted.stop = true;
            self.control.changed.notify_all();
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the Curator contender panicked".into())),
            None => Ok(0),
        }
    }
}

impl Drop for CuratorContender {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The contender's loop, on its own thread.
struct Loop<'a> {
    control: &'a Control,
    peer: &'a CuratorPeer,
    connect: &'a str,
    session_timeout: Duration,
    /// A session of its own to read the zxid of Curator's node; made again after a fault
    /// ended it.
    raw: Option<zk::Client>,
    dir: &'a str,
    register: register::Writer,
    process: usize,
    rng: u64,
}

impl Loop<'_> {
    async fn run(&mut self, record: &impl Fn(Section)) -> Result<usize, String> {
        let mut sections = 0;
        loop {
            {
                let mut wanted = self.control.lock();
                if wanted.stop {
                    return Ok(sections);
                }
                wanted.quiet = wanted.idle;
                if wanted.idle {
                    self.control.changed.notify_all();
                    // Woken by `go` or `stop`; the timeout only bounds a missed wake-up.
                    drop(self.control.changed.wait_timeout(wanted, Duration::from_millis(100)));
                    continue;
                }
            }
            self.peer
                .acquire(ID, Some(ACQUIRE_TIMEOUT))
                .map_err(|e| e.to_string())?;
            match self.peer.wait_acquired(ID, ACQUIRE_TIMEOUT + ANSWER_WITHIN).await {
                Ok(node) => {
                    if let Some(section) = self.section(&node).await {
                        record(section);
                        sections += 1;
                    }
                    // A release that fails (the session was lost meanwhile) leaves nothing
                    // to do: Curator forgets the hold either way.
                    let _ = self.peer.release(ID).await;
                }
                // Curator gave up at its timeout, or a request failed with the connection.
                Err(PeerError::NotAcquired { .. } | PeerError::Peer { .. }) => {}
                Err(err) => return Err(format!("the Curator peer stopped answering: {err}")),
            }
            let pause = 20 + self.below(100);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// One section on the node `node` Curator was granted: the claim, 5–25 ms of work, the
    /// closing write. `None` if the node's zxid cannot be read (it is gone already).
    async fn section(&mut self, node: &str) -> Option<Section> {
        let granted_ns = now_ns();
        let stat = self.stat(node).await?;
        let part = Part {
            lock: LOCK.into(),
            token: Token {
                zxid: stat.czxid,
                generation: 0,
            },
        };
        let claimed = self.register.write("claim", CLIENT, &part, None).await;
        let start_ns = now_ns();
        let work = 5 + self.below(21);
        tokio::time::sleep(Duration::from_millis(work)).await;
        let end_ns = now_ns();
        let done = self.register.write("done", CLIENT, &part, None).await;
        Some(Section {
            client: CLIENT.into(),
            process: self.process,
            lock: LOCK.into(),
            token: part.token,
            second: None,
            lost_at_grant: false,
            granted_ns,
            start_ns,
            end_ns,
            lost: false,
            lost_ns: None,
            misbehaving: false,
            long: false,
            writes_attempted: 2,
            writes_rejected: u32::from(!claimed) + u32::from(!done),
            complete: true,
            revoked: false,
        })
    }

    /// The stat of `node`, read on the raw session once it caught up with the leader (it may
    /// be on another member than the peer's); `None` if the node is gone or cannot be read
    /// now, in which case the session is made again for the next read.
    async fn stat(&mut self, node: &str) -> Option<zk::Stat> {
        if self.raw.is_none() {
            let connecting = zk::Client::connector()
                .with_session_timeout(self.session_timeout)
                .connect(self.connect);
            self.raw = tokio::time::timeout(self.session_timeout, connecting).await.ok()?.ok();
        }
        let raw = self.raw.as_ref()?;
        let read = async {
            raw.sync(self.dir).await?;
            raw.check_stat(node).await
        };
        match tokio::time::timeout(self.session_timeout, read).await {
            Ok(Ok(stat)) => stat,
            _ => {
                self.raw = None;
                None
            }
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }
}
