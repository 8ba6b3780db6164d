//! A real ZooKeeper quorum on loopback: [`ZkEnsemble`] and its builder.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::error::TestingError;
use super::ports::free_port;
use super::proxy::FaultProxy;
use super::server::{settings_methods, Peer, Role, Settings, ZkServer};

/// How long one member may take to answer a status query.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1500);
/// How many times a start is retried on fresh ports when another process took a port first.
const PORT_ATTEMPTS: usize = 3;

/// An N-member ZooKeeper ensemble (`QuorumPeerMain` processes with `myid` files and
/// `server.N=127.0.0.1:peer:election` lines) on free loopback ports.
///
/// Modelled on Curator's `TestingCluster`. Members are numbered from 0 (their ZooKeeper `myid`
/// is index + 1) and keep their ports and data across [`restart`](Self::restart). Dropping the
/// ensemble kills every member and removes their data.
///
/// ```no_run
/// use std::time::Duration;
/// use zklock_testing::ZkEnsemble;
///
/// let ensemble = ZkEnsemble::start(3)?;
/// let leader = ensemble.leader().expect("a started ensemble has a leader");
/// ensemble.kill(leader)?;
/// let new_leader = ensemble.wait_for_quorum(Duration::from_secs(30))?;
/// assert_ne!(new_leader, leader);
/// ensemble.restart(leader)?; // rejoins as a follower
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug)]
pub struct ZkEnsemble {
    members: Vec<ZkServer>,
    start_timeout: Duration,
}

impl ZkEnsemble {
    /// Starts an ensemble of `size` members with default settings and waits until every member
    /// serves as leader or follower (by default for at most 60 s).
    pub fn start(size: usize) -> Result<ZkEnsemble, TestingError> {
        ZkEnsemble::builder(size).start()
    }

    /// A builder for an ensemble of `size` members with non-default settings.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let ensemble = zklock_testing::ZkEnsemble::builder(3)
    ///     .tick_time(Duration::from_millis(100))
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn builder(size: usize) -> ZkEnsembleBuilder {
        let settings = Settings {
            system_properties: vec![
                // Election rounds back off up to 60 s by default; a test wants a leader soon.
                ("zookeeper.fastleader.maxNotificationInterval".into(), "1000".into()),
            ],
            ..Settings::default()
        };
        ZkEnsembleBuilder { size, settings }
    }

    /// The client connect string of all members, comma separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A connect string naming the given proxies (e.g. one per member, from
    /// [`proxies`](Self::proxies)), comma separated.
    pub fn connect_string_via(&self, proxies: &[FaultProxy]) -> String {
        proxies
            .iter()
            .map(FaultProxy::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts one [`FaultProxy`] in front of each member, in member order. Since members keep
    /// their ports across restarts, the proxies stay valid.
    ///
    /// ```no_run
    /// let ensemble = zklock_testing::ZkEnsemble::start(3)?;
    /// let proxies = ensemble.proxies()?;
    /// let connect = ensemble.connect_string_via(&proxies);
    /// proxies[0].blackhole(); // cut the client off from member 0 only
    /// # let _ = connect;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn proxies(&self) -> Result<Vec<FaultProxy>, TestingError> {
        self.members.iter().map(|m| FaultProxy::start(m.addr())).collect()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the ensemble has no members (never true for a started ensemble).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index` (0-based), or an error when out of range.
    pub fn member(&self, index: usize) -> Result<&ZkServer, TestingError> {
        self.members.get(index).ok_or_else(|| {
            TestingError::InvalidArgument(format!(
                "member {index} does not exist in an ensemble of {}",
                self.len()
            ))
        })
    }

    /// All members, in order.
    pub fn members(&self) -> &[ZkServer] {
        &self.members
    }

    /// Stops member `index` gracefully (see [`ZkServer::stop`]).
    pub fn stop(&self, index: usize) -> Result<(), TestingError> {
        self.member(index)?.stop()
    }

    /// Kills member `index` with SIGKILL (see [`ZkServer::kill`]).
    pub fn kill(&self, index: usize) -> Result<(), TestingError> {
        self.member(index)?.kill()
    }

    /// Restarts member `index` on its ports with its data, and waits until it has rejoined the
    /// quorum as leader or follower (which needs a quorum of the other members to be up).
    pub fn restart(&self, index: usize) -> Result<(), TestingError> {
        self.member(index)?.restart()
    }

    /// Freezes member `index` with SIGSTOP (see [`ZkServer::pause`]).
    pub fn pause(&self, index: usize) -> Result<(), TestingError> {
        self.member(index)?.pause()
    }

    /// Lets a paused member `index` run again (see [`ZkServer::resume`]).
    pub fn resume(&self, index: usize) -> Result<(), TestingError> {
        self.member(index)?.resume()
    }

    /// The index of the member that reports `Mode: leader` in `srvr`, if any. Stopped and
    /// paused members are not asked.
    pub fn leader(&self) -> Option<usize> {
        self.modes().into_iter().position(|m| m.as_deref() == Some("leader"))
    }

    /// What each member reports as its mode (`None`: stopped, paused, or not serving).
    pub fn modes(&self) -> Vec<Option<String>> {
        self.members
            .iter()
            .map(|m| {
                if m.is_running() && !m.is_paused() {
                    m.mode_with_timeout(STATUS_TIMEOUT)
                } else {
                    None
                }
            })
            .collect()
    }

    /// Waits until a majority of members serve, one of them as leader, and returns the leader's
    /// index.
    pub fn wait_for_quorum(&self, timeout: Duration) -> Result<usize, TestingError> {
        let started = Instant::now();
        let majority = self.len() / 2 + 1;
        loop {
            let modes = self.modes();
            let serving = modes
                .iter()
                .flatten()
                .filter(|m| *m == "leader" || *m == "follower")
                .count();
            let leaders: Vec<usize> = modes
                .iter()
                .enumerate()
                .filter(|(_, m)| m.as_deref() == Some("leader"))
                .map(|(i, _)| i)
                .collect();
            if serving >= majority && leaders.len() == 1 {
                return Ok(leaders[0]);
            }
            if started.elapsed() >= timeout {
                let members = modes
                    .iter()
                    .enumerate()
                    .map(|(i, m)| format!("{i}: {}", m.as_deref().unwrap_or("not serving")))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(TestingError::NoQuorum {
                    waited: started.elapsed(),
                    members,
                });
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The default bound on starts, also used by callers waiting for a member.
    pub fn start_timeout(&self) -> Duration {
        self.start_timeout
    }
}

/// Settings for a [`ZkEnsemble`]; from [`ZkEnsemble::builder`].
#[derive(Debug, Clone)]
pub struct ZkEnsembleBuilder {
    size: usize,
    settings: Settings,
}

impl ZkEnsembleBuilder {
    settings_methods!();

    /// `initLimit` in ticks: how long followers may take to connect and sync to a leader.
    /// Default 100 (20 s at the default tick: JVMs start slowly on a loaded machine).
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.settings.init_limit = ticks.max(1);
        self
    }

    /// `syncLimit` in ticks: how long a follower may lag or be silent before the leader drops it
    /// (and how quickly a paused leader is noticed). Default 25 (5 s at the default tick).
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.settings.sync_limit = ticks.max(1);
        self
    }

    /// Starts every member and waits until each serves as leader or follower.
    pub fn start(self) -> Result<ZkEnsemble, TestingError> {
        if self.size == 0 {
            return Err(TestingError::InvalidArgument(
                "an ensemble needs at least one member".into(),
            ));
        }
        let settings = Arc::new(self.settings);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut peers = Vec::with_capacity(self.size);
            for i in 0..self.size {
                peers.push(Peer {
                    myid: i + 1,
                    client_port: free_port()?,
                    quorum_port: free_port()?,
                    election_port: free_port()?,
                });
            }
            let peers = Arc::new(peers);
            let members = peers
                .iter()
                .map(|p| {
                    let role = Role::Member {
                        myid: p.myid,
                        peers: peers.clone(),
                    };
                    ZkServer::prepare(settings.clone(), role, p.client_port)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let ensemble = ZkEnsemble {
                members,
                start_timeout: settings.start_timeout,
            };
            for member in &ensemble.members {
                member.spawn()?;
            }
            let deadline = Instant::now() + settings.start_timeout;
            let ready = ensemble.members.iter().try_for_each(|m| m.wait_ready(deadline));
            match ready {
                Ok(()) => return Ok(ensemble),
                Err(e) if attempt < PORT_ATTEMPTS && ensemble.members.iter().any(ZkServer::lost_port_race) => {
                    tracing::debug!("retrying the ensemble on fresh ports: {e}");
                }
                Err(e) => return Err(e),
            }
        }
    }
}
