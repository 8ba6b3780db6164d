//! The ZooKeeper server the bench measures against: one it starts itself with stated settings,
//! or one the user names with `--zk`. Also the four-letter words used for the herd check.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A server under measurement.
pub struct Server {
    pub connect: String,
    pub settings: Value,
    child: Option<Child>,
    data_dir: Option<PathBuf>,
    /// Members of an ensemble the bench started; they stop when it is dropped.
    _ensemble: Option<zklock::testing::ZkEnsemble>,
}

/// Settings of a server the bench starts.
pub struct Settings {
    pub tick_time_ms: u32,
    pub force_sync: bool,
}

impl Server {
    /// CPU time (user + system, all threads) the server process has used so far: known for a
    /// standalone server the bench started, `None` for an ensemble or a `--zk` server.
    pub fn cpu(&self) -> Option<Duration> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) end in ')'; utime and stime
        // are fields 14 and 15 of the whole line, in clock ticks.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (per_second > 0).then(|| Duration::from_secs_f64(ticks as f64 / per_second as f64))
    }

    /// The server process's memory right after a full collection (run through `jcmd`): its
    /// Java heap in use and its resident set; `null` where unknown (an ensemble, a
    /// `--zk` server, no `jcmd`).
    pub async fn memory(&self) -> Value {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return json!({ "rss_mb": null, "heap_used_after_gc_mb": null });
        };
        let heap = tokio::task::spawn_blocking(move || heap_used_after_gc_kib(pid))
            .await
            .ok()
            .flatten();
        // Read after the collection, which may have handed heap back to the system.
        let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))?
                    .split_whitespace()
                    .next()?
                    .parse::<f64>()
                    .ok()
            });
        let mb = |kib: f64| (kib / 1024.0 * 100.0).round() / 100.0;
        json!({ "rss_mb": rss.map(mb), "heap_used_after_gc_mb": heap.map(mb) })
    }

    /// Starts a standalone ZooKeeper from the Debian jars on a free port, data in a temp dir.
    pub fn start(settings: &Settings) -> Result<Server, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let data_dir = std::env::temp_dir().join(format!("zklock-bench-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let force_sync = if settings.force_sync { "yes" } else { "no" };
        let config = format!(
            "tickTime={}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             maxClientCnxns=0\nforceSync={force_sync}\n4lw.commands.whitelist=*\n\
             admin.enableServer=false\n",
            settings.tick_time_ms,
            data_dir.display(),
        );
        let cfg = data_dir.join("zoo.cfg");
        std::fs::write(&cfg, &config).map_err(|e| format!("{}: {e}", cfg.display()))?;
        let jar = "/usr/share/java/zookeeper.jar";
        if !std::path::Path::new(jar).exists() {
            return Err(format!("{jar} not found (run scripts/install-deps.sh)"));
        }
        let log = std::fs::File::create(data_dir.join("server.log")).map_err(|e| e.to_string())?;
        let child = Command::new("java")
            .args(["-Xmx512m", "-cp"])
            .arg(format!("{jar}:/usr/share/java/slf4j-nop.jar"))
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start java (run scripts/install-deps.sh): {e}"))?;
        let mut server = Server {
            connect: format!("127.0.0.1:{port}"),
            settings: Value::Null,
            child: Some(child),
            data_dir: Some(data_dir.clone()),
            _ensemble: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while four_letter_word(&server.connect, "ruok").as_deref() != Ok("imok") {
            if Instant::now() > deadline {
                return Err(format!(
                    "ZooKeeper did not start within 60 s; see {}",
                    data_dir.join("server.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        server.settings = json!({
            "started_by_bench": true,
            "version": server_version(&server.connect),
            "mode": "standalone",
            "tickTime_ms": settings.tick_time_ms,
            "forceSync": force_sync,
            "maxClientCnxns": 0,
            "dataDir": "temporary directory on the local disk",
            "jvm": "-Xmx512m",
            "connect": server.connect,
        });
        Ok(server)
    }

    /// A server the user runs; its settings are whatever it reports.
    pub fn external(connect: &str) -> Server {
        let conf = four_letter_word(connect, "conf").unwrap_or_default();
        let field = |key: &str| {
            conf.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                .map(str::to_owned)
        };
        Server {
            connect: connect.to_owned(),
            settings: json!({
                "started_by_bench": false,
                "version": server_version(connect),
                "tickTime_ms": field("tickTime"),
                "forceSync": "unknown (not reported by the conf command)",
                "maxClientCnxns": field("maxClientCnxns"),
                "connect": connect,
            }),
            child: None,
            data_dir: None,
            _ensemble: None,
        }
    }

    /// Starts an ensemble of `size` members on loopback and points the clients at one
    /// follower, as in production: every write is forwarded to the leader and needs a quorum.
    pub fn ensemble(size: usize, settings: &Settings) -> Result<Server, String> {
        let ensemble = zklock::testing::ZkEnsemble::builder(size)
            .tick_time(Duration::from_millis(settings.tick_time_ms.into()))
            .force_sync(settings.force_sync)
            .start()
            .map_err(|e| format!("cannot start the ensemble: {e}"))?;
        let leader = ensemble
            .wait_for_quorum(Duration::from_secs(60))
            .map_err(|e| format!("the ensemble has no quorum: {e}"))?;
        let follower = (0..size)
            .find(|&i| i != leader)
            .ok_or("an ensemble of one has no follower")?;
        let connect = ensemble.members()[follower].connect_string();
        let settings = json!({
            "started_by_bench": true,
            "version": server_version(&connect),
            "mode": format!("ensemble of {size} on loopback, clients on a follower"),
            "tickTime_ms": settings.tick_time_ms,
            "forceSync": if settings.force_sync { "yes" } else { "no" },
            "maxClientCnxns": 0,
            "dataDir": "temporary directories on the local disk",
            "connect": connect,
        });
        Ok(Server {
            connect,
            settings,
            child: None,
            data_dir: None,
            _ensemble: Some(ensemble),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub fn server_version(connect: &str) -> Option<String> {
    let mntr = four_letter_word(connect, "mntr").ok()?;
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_version"))
        .map(|v| v.trim().split([',', '-']).next().unwrap_or("").trim().to_owned())
}

/// Sends a four-letter word to the first server of a connect string.
pub fn four_letter_word(connect: &str, word: &str) -> Result<String, String> {
    let first = connect.split(',').next().unwrap_or(connect);
    let first = first.split('/').next().unwrap_or(first);
    let addr = first
        .to_socket_addrs()
        .map_err(|e| format!("{first}: {e}"))?
        .next()
        .ok_or_else(|| format!("{first}: no address"))?;
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.write_all(word.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer.trim().to_owned())
}

/// Watch notifications the server has sent so far: the sum over ZooKeeper's per-event
/// "watchers triggered" summaries (created, deleted, data changed, children changed).
pub fn notifications_sent(connect: &str) -> Result<u64, String> {
    let mntr = four_letter_word(connect, "mntr")?;
    let mut total = 0;
    let mut found = 0;
    for line in mntr.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        if key.starts_with("zk_sum_node_") && key.ends_with("_watch_count") {
            total += value.parse::<u64>().map_err(|e| format!("{key}: {e}"))?;
            found += 1;
        }
    }
    if found == 0 {
        return Err(
            "mntr has no zk_sum_node_*_watch_count (needs ZooKeeper 3.6+ and 4lw.commands.whitelist=mntr)".into(),
        );
    }
    Ok(total)
}

/// The Java heap in use in process `pid` right after a full collection, in KiB: `jcmd GC.run`,
/// then the `used` figure of the heap line of `jcmd GC.heap_info`.
fn heap_used_after_gc_kib(pid: u32) -> Option<f64> {
    let jcmd = |command: &str| {
        let out = Command::new("jcmd")
            .arg(pid.to_string())
            .arg(command)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    jcmd("GC.run")?;
    let info = jcmd("GC.heap_info")?;
    let line = info.lines().find(|l| l.contains("heap") && l.contains("used"))?;
    let used = line.split("used").nth(1)?.trim_start();
    let digits: String = used.chars().take_while(char::is_ascii_digit).collect();
    let value: f64 = digits.parse().ok()?;
    match used[digits.len()..].chars().next()? {
        'K' => Some(value),
        'M' => Some(value * 1024.0),
        'G' => Some(value * 1024.0 * 1024.0),
        _ => None,
    }
}

/// `mntr`: every key the server reports, with its value as written.
pub fn mntr(connect: &str) -> Result<std::collections::HashMap<String, String>, String> {
    let answer = four_letter_word(connect, "mntr")?;
    let pairs: std::collections::HashMap<String, String> = answer
        .lines()
        .filter_map(|l| {
            let (key, value) = l.split_once(char::is_whitespace)?;
            Some((key.to_owned(), value.trim().to_owned()))
        })
        .collect();
    if pairs.is_empty() {
        return Err(format!(
            "mntr gave no figures (4lw.commands.whitelist needs mntr): {answer}"
        ));
    }
    Ok(pairs)
}

/// `wchp`: the sessions (as `0x...`) with a watch on `path`, one entry per watch.
pub fn watchers_of(connect: &str, path: &str) -> Result<Vec<String>, String> {
    let wchp = four_letter_word(connect, "wchp")?;
    let mut watchers = Vec::new();
    let mut in_path = false;
    for line in wchp.lines() {
        if line.starts_with(char::is_whitespace) {
            if in_path {
                watchers.push(line.trim().to_owned());
            }
        } else {
            in_path = line.trim() == path;
        }
    }
    Ok(watchers)
}

/// `wchs`: (connections watching, paths watched, total watches).
pub fn watch_summary(connect: &str) -> Result<(u64, u64, u64), String> {
    let wchs = four_letter_word(connect, "wchs")?;
    let nums: Vec<u64> = wchs
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [connections, paths, total, ..] => Ok((connections, paths, total)),
        _ => Err(format!("unexpected wchs answer: {wchs}")),
    }
}
