//! A real ZooKeeper quorum on loopback: [`ZkEnsemble`] and its builder.

use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::error::TestingError;
use super::ports::free_port;
use super::proxy::{FaultProxy, FirstMessage, ProxyMode};
use super::server::{settings_methods, Peer, Role, Settings, ZkServer};

/// How long one member may take to answer a status query.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long a peer link retries a member that does not listen yet (a leader just elected).
const PEER_CONNECT_PATIENCE: Duration = Duration::from_secs(2);
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
    /// Member-to-member connections, when built [`partitionable`](ZkEnsembleBuilder::partitionable).
    links: Vec<PeerLink>,
    start_timeout: Duration,
}

/// The proxies member `from` reaches member `to` through: one for the quorum port (followers
/// to their leader) and one for the election port.
#[derive(Debug)]
struct PeerLink {
    from: usize,
    to: usize,
    quorum: FaultProxy,
    election: FaultProxy,
}

impl PeerLink {
    fn touches(&self, member: usize) -> bool {
        self.from == member || self.to == member
    }

    fn set_mode(&self, mode: ProxyMode) {
        self.quorum.set_mode(mode);
        self.election.set_mode(mode);
    }
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
        ZkEnsembleBuilder {
            size,
            settings,
            partitionable: false,
        }
    }

    /// The client connect string of all members, comma separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(ZkServer::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The members' TLS ports, `127.0.0.1:P1,127.0.0.1:P2,…`, for an ensemble started with
    /// [`ZkEnsembleBuilder::tls`].
    pub fn secure_connect_string(&self) -> Option<String> {
        self.members
            .iter()
            .map(ZkServer::secure_connect_string)
            .collect::<Option<Vec<_>>>()
            .map(|all| all.join(","))
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

    /// Cuts member `index` off from every other member, both ways, while its clients stay
    /// connected to it: the network partition in which a member keeps serving its clients
    /// until it gives up on its leader (`syncLimit × tickTime`), while the other members carry
    /// on and may expire the sessions of its clients. Traffic between members is dropped, not
    /// refused, as a real partition would. Needs an ensemble built
    /// [`partitionable`](ZkEnsembleBuilder::partitionable).
    ///
    /// ```no_run
    /// let ensemble = zklock_testing::ZkEnsemble::builder(3).partitionable().start()?;
    /// let follower = (0..3).find(|&i| Some(i) != ensemble.leader()).unwrap();
    /// ensemble.isolate(follower)?; // its clients see no trouble for syncLimit × tickTime
    /// ensemble.heal(follower)?; // it rejoins the quorum
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn isolate(&self, index: usize) -> Result<(), TestingError> {
        self.set_links(index, ProxyMode::Blackhole)
    }

    /// Ends an [`isolate`](Self::isolate): the member's links to the others pass traffic again
    /// (connections that lost bytes are reset, and the members reconnect).
    pub fn heal(&self, index: usize) -> Result<(), TestingError> {
        self.set_links(index, ProxyMode::Pass)
    }

    /// Delays every chunk member `index` exchanges with the other members by `latency`, both
    /// ways, so that it applies the quorum's writes late: a member that lags. Keep `latency`
    /// under `syncLimit × tickTime`, or the leader drops the member as too slow. `Duration::ZERO`
    /// ends the delay. Needs an ensemble built [`partitionable`](ZkEnsembleBuilder::partitionable).
    pub fn delay(&self, index: usize, latency: Duration) -> Result<(), TestingError> {
        for link in self.links_of(index)? {
            link.quorum.set_latency(latency);
            link.election.set_latency(latency);
        }
        Ok(())
    }

    /// Whether member `index` is cut off by [`isolate`](Self::isolate): every link from and
    /// to it drops traffic.
    pub fn is_isolated(&self, index: usize) -> bool {
        let mut links = self.links.iter().filter(|l| l.touches(index)).peekable();
        links.peek().is_some() && links.all(|l| l.quorum.mode() == ProxyMode::Blackhole)
    }

    fn set_links(&self, index: usize, mode: ProxyMode) -> Result<(), TestingError> {
        for link in self.links_of(index)? {
            link.set_mode(mode);
        }
        Ok(())
    }

    /// The links from and to member `index`.
    fn links_of(&self, index: usize) -> Result<impl Iterator<Item = &PeerLink>, TestingError> {
        self.member(index)?;
        if self.links.is_empty() {
            return Err(TestingError::InvalidArgument(
                "the ensemble was not built partitionable(): its members talk to each other directly".into(),
            ));
        }
        Ok(self.links.iter().filter(move |l| l.touches(index)))
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
    partitionable: bool,
}

impl ZkEnsembleBuilder {
    settings_methods!();

    /// `initLimit` in ticks: how long followers may take to connect and sync to a leader.
    /// Default 100 (20 s at the default tick: JVMs start slowly on a loaded machine).
    #[must_use]
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.settings.init_limit = ticks.max(1);
        self
    }

    /// `syncLimit` in ticks: how long a follower may lag or be silent before the leader drops it,
    /// and how long a member cut off from its leader keeps serving its clients. Default 5 (1 s
    /// at the default tick, ZooKeeper's own default count), so that 4 s sessions meet zklock's
    /// loss-timing precondition (`session timeout > syncLimit × tickTime + loss_after + margin`).
    #[must_use]
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.settings.sync_limit = ticks.max(1);
        self
    }

    /// Routes every member-to-member connection (quorum and election ports) through a
    /// [`FaultProxy`], so that [`ZkEnsemble::isolate`] can cut one member off from the others.
    /// Clients still connect to the members directly (or through [`ZkEnsemble::proxies`]).
    #[must_use]
    pub fn partitionable(mut self) -> Self {
        self.partitionable = true;
        self
    }

    /// Starts every member and waits until each serves as leader or follower.
    pub fn start(mut self) -> Result<ZkEnsemble, TestingError> {
        if let Some(why) = self.settings.invalid.take() {
            return Err(TestingError::InvalidArgument(why));
        }
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
            let secure_ports = (0..self.size)
                .map(|_| settings.tls.as_ref().map(|_| free_port()).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            let links = if self.partitionable {
                peer_links(&peers)?
            } else {
                Vec::new()
            };
            let members = (0..self.size)
                .map(|i| {
                    let role = Role::Member {
                        myid: peers[i].myid,
                        peers: Arc::new(view_of(i, &peers, &links)),
                    };
                    ZkServer::prepare(settings.clone(), role, peers[i].client_port, secure_ports[i])
                })
                .collect::<Result<Vec<_>, _>>()?;
            let ensemble = ZkEnsemble {
                members,
                links,
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

/// One proxy pair for each ordered pair of members.
///
/// Election connections need one more step. A member that dials a member with a higher id
/// sends its own election address in its first message; the higher member then hangs up and
/// dials back to *that* address, which would bypass the proxies. So the link `from → to`
/// rewrites that address to the one of the link `to → from`.
fn peer_links(peers: &[Peer]) -> Result<Vec<PeerLink>, TestingError> {
    let mut links = Vec::new();
    let mut reverse_addrs = Vec::new();
    for (from, _) in peers.iter().enumerate() {
        for (to, target) in peers.iter().enumerate().filter(|(to, _)| *to != from) {
            let reverse = Arc::new(OnceLock::<String>::new());
            let advertise = reverse.clone();
            let rewrite = FirstMessage(Arc::new(move |bytes: &[u8]| {
                let addr = advertise.get()?;
                election_hello_with_address(bytes, addr)
            }));
            links.push(PeerLink {
                from,
                to,
                quorum: FaultProxy::start_with(loopback(target.quorum_port), PEER_CONNECT_PATIENCE, None)?,
                election: FaultProxy::start_with(loopback(target.election_port), PEER_CONNECT_PATIENCE, Some(rewrite))?,
            });
            reverse_addrs.push(reverse);
        }
    }
    for (link, reverse) in links.iter().zip(&reverse_addrs) {
        let back = links
            .iter()
            .find(|l| l.from == link.to && l.to == link.from)
            .expect("every ordered pair of members has a link");
        let _ = reverse.set(back.election.addr().to_string());
    }
    Ok(links)
}

/// ZooKeeper's first message on an election connection (3.5+, `QuorumCnxManager`): protocol
/// version (`-65536` or `-65535`) and sender id as 8-byte big-endian numbers, then the sender's
/// election address(es) as a 4-byte length and that many bytes. Returns the message with the
/// address replaced by `addr`, followed by whatever came after it; `None` until the message is
/// complete. A message of another shape passes unchanged.
fn election_hello_with_address(bytes: &[u8], addr: &str) -> Option<Vec<u8>> {
    const PROTOCOL_VERSIONS: [i64; 2] = [-65536, -65535];
    let version = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    if !PROTOCOL_VERSIONS.contains(&version) {
        return Some(bytes.to_vec());
    }
    let len = i32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?);
    let Ok(len) = usize::try_from(len) else {
        return Some(bytes.to_vec());
    };
    let rest = bytes.get(20 + len..)?;
    let mut out = Vec::with_capacity(20 + addr.len() + rest.len());
    out.extend_from_slice(&bytes[..16]);
    out.extend_from_slice(&(addr.len() as i32).to_be_bytes());
    out.extend_from_slice(addr.as_bytes());
    out.extend_from_slice(rest);
    Some(out)
}

/// The `server.N` lines member `me` is configured with: its own ports, and the others' as
/// reached through their links (the real ports when there are none).
fn view_of(me: usize, peers: &[Peer], links: &[PeerLink]) -> Vec<Peer> {
    peers
        .iter()
        .enumerate()
        .map(|(to, peer)| match links.iter().find(|l| l.from == me && l.to == to) {
            Some(link) => Peer {
                quorum_port: link.quorum.addr().port(),
                election_port: link.election.addr().port(),
                ..peer.clone()
            },
            None => peer.clone(),
        })
        .collect()
}

fn loopback(port: u16) -> std::net::SocketAddr {
    (std::net::Ipv4Addr::LOCALHOST, port).into()
}

#[cfg(test)]
mod tests {
    use super::election_hello_with_address;

    fn hello(version: i64, sid: i64, addr: &str, rest: &[u8]) -> Vec<u8> {
        let mut v = version.to_be_bytes().to_vec();
        v.extend_from_slice(&sid.to_be_bytes());
        v.extend_from_slice(&(addr.len() as i32).to_be_bytes());
        v.extend_from_slice(addr.as_bytes());
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn the_election_hello_advertises_the_proxy() {
        let original = hello(-65536, 2, "127.0.0.1:4001", b"vote");
        for cut in 0..original.len() - 4 {
            assert_eq!(
                election_hello_with_address(&original[..cut], "127.0.0.1:50000"),
                None,
                "{cut}"
            );
        }
        assert_eq!(
            election_hello_with_address(&original, "127.0.0.1:50000"),
            Some(hello(-65536, 2, "127.0.0.1:50000", b"vote"))
        );
        // A sender id in place of a version (pre-3.5 peers) passes unchanged.
        let old = 3i64.to_be_bytes().to_vec();
        assert_eq!(election_hello_with_address(&old, "x"), Some(old.clone()));
    }
}
