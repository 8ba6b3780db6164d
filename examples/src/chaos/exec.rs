//! The `zklock exec` workload of the chaos run (`chaos exec`): several slots each run `zklock
//! exec` on one lock name again and again, every one through its own fault proxy in front of a
//! ZooKeeper server. Each command does its work in a *child* process (a shell's background job
//! that it stops when done, or now and then leaves running as it exits), which appends lines
//! tagged with the grant's fencing token to one shared log. Meanwhile the runner SIGKILLs the holding `zklock` (its command and the child must die
//! with it), SIGKILLs a waiting one, deletes the holder's node as an operator would, asks the
//! holder to release (revocation), and partitions the holder past its session timeout.
//!
//! Every contender uses a lock-delay (1 s by default): a holder's node that vanishes without a
//! clean release (deleted, its session expired) keeps the next holder out for that long, time
//! for the old holder to learn of the loss and kill its command's group.
//!
//! The check reads the log: the lines of one grant form one block (a grant never writes again
//! once another grant's line came), and the blocks' tokens strictly increase. Any other order is
//! work that ran outside its lock.

use std::collections::{BTreeMap, HashSet};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use zklock::testing::{FaultProxy, ZkServer};
use zklock::LockClient;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The lock every slot takes.
pub const LOCK: &str = "chaos-exec";

/// Settings of an exec chaos run.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// How long to keep injecting faults (at least one round of every kind).
    pub duration: Duration,
    /// Slots, each running one `zklock exec` after another.
    pub slots: usize,
    /// Session timeout of every `zklock exec`.
    pub session_timeout: Duration,
    /// Server tick.
    pub tick_time: Duration,
    /// Lock-delay every contender gives the lock.
    pub lock_delay: Duration,
    /// The `zklock` binary.
    pub zklock: PathBuf,
    /// Seed of the fault order and of how long each command works.
    pub seed: u64,
    /// Print progress to stderr.
    pub verbose: bool,
}

/// The kinds of fault, in the order of the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecFault {
    /// SIGKILL of the `zklock exec` that holds the lock.
    KillHolder,
    /// SIGKILL of a `zklock exec` that waits for the lock.
    KillWaiter,
    /// The holder's node deleted by someone else.
    DeleteNode,
    /// A revocation request written into the holder's node.
    Revoke,
    /// The holder's connection dropped silently until its session has expired.
    PartitionHolder,
}

impl ExecFault {
    /// Every kind, in the order of the first round.
    pub const ALL: [ExecFault; 5] = [
        ExecFault::KillHolder,
        ExecFault::KillWaiter,
        ExecFault::DeleteNode,
        ExecFault::Revoke,
        ExecFault::PartitionHolder,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            ExecFault::KillHolder => "kill_holder",
            ExecFault::KillWaiter => "kill_waiter",
            ExecFault::DeleteNode => "delete_node",
            ExecFault::Revoke => "revoke",
            ExecFault::PartitionHolder => "partition_holder",
        }
    }
}

/// The verdict of a run.
#[derive(Debug, Default, Serialize)]
pub struct ExecReport {
    /// `zklock exec` processes started.
    pub execs: usize,
    /// Grants whose command wrote at least one line.
    pub grants: usize,
    /// Lines in the log.
    pub lines: usize,
    /// Faults injected, by kind (a kind that found no target is not counted).
    pub faults: BTreeMap<String, usize>,
    /// How the `zklock exec` processes ended, by their `--status-file` outcome (`killed` when
    /// there was none: SIGKILLed).
    pub outcomes: BTreeMap<String, usize>,
    /// Lines written by a grant after another grant had written: work outside its lock.
    pub overlap_lines: usize,
    /// The first few of those lines, said.
    pub overlaps: Vec<String>,
    /// A grant whose token is not larger than the one before it in the log.
    pub tokens_out_of_order: Vec<String>,
}

impl ExecReport {
    /// No overlap, tokens in order.
    pub fn passed(&self) -> bool {
        self.overlap_lines == 0 && self.tokens_out_of_order.is_empty()
    }

    /// The verdict as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// How many violations a report spells out.
const SAID_AT_MOST: usize = 20;

/// Checks a log of `TOKEN N` lines: each token's lines form one block, and the blocks' tokens
/// strictly increase (fixed-width hex: the text sorts like the token).
pub fn check_log(log: &str, report: &mut ExecReport) {
    let mut done: HashSet<&str> = HashSet::new();
    let mut current: Option<&str> = None;
    for (number, line) in log.lines().enumerate() {
        report.lines += 1;
        let token = line.split_whitespace().next().unwrap_or("");
        if current == Some(token) {
            continue;
        }
        if done.contains(token) {
            report.overlap_lines += 1;
            if report.overlaps.len() < SAID_AT_MOST {
                report.overlaps.push(format!(
                    "line {}: grant {token} wrote again after grant {} had written",
                    number + 1,
                    current.unwrap_or("?")
                ));
            }
        } else if let Some(before) = current {
            if token <= before {
                report
                    .tokens_out_of_order
                    .push(format!("line {}: grant {token} came after grant {before}", number + 1));
            }
        }
        if let Some(before) = current {
            done.insert(before);
        }
        if !done.contains(token) {
            report.grants += 1;
        }
        current = Some(token);
    }
}

/// A slot's `zklock exec` of the moment.
#[derive(Default)]
struct SlotNow {
    /// Its pid, while it runs.
    pid: Option<u32>,
}

struct Slot {
    proxy: FaultProxy,
    now: Arc<Mutex<SlotNow>>,
}

/// What the command of every `zklock exec` runs: a background writer (a child process) that
/// appends lines tagged with the grant's token to the log every 10 ms until it is killed; the
/// command records its node, lets the writer run for `$HOLD` seconds, then kills it and waits
/// for it, or, with `LEAVE=1`, exits and leaves it running (for `zklock exec` to stop). A writer
/// that outlives its `zklock exec` writes into the next grant's lines.
const SCRIPT: &str = r#"echo "$ZKLOCK_NODE" > "$SLOT_DIR/node"
sh -c 'i=0; while :; do echo "$ZKLOCK_FENCING_TOKEN $i" >> "$LOG"; i=$((i+1)); sleep 0.01; done' &
writer=$!
sleep "$HOLD"
[ "$LEAVE" = 1 ] && exit 0
kill "$writer"; wait "$writer"; exit 0"#;

/// Runs the workload and checks the log.
pub fn run_exec(config: &ExecConfig) -> Result<ExecReport, BoxError> {
    if !config.zklock.exists() {
        return Err(format!(
            "no zklock binary at {} (build it: cargo build -p zklock-cli)",
            config.zklock.display()
        )
        .into());
    }
    let t0 = Instant::now();
    let say = |what: String| {
        if config.verbose {
            eprintln!("[{:>7.1}s] {what}", t0.elapsed().as_secs_f64());
        }
    };
    let server = ZkServer::builder().tick_time(config.tick_time).start()?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("log");
    say(format!("server up: {}; log {}", server.connect_string(), log.display()));

    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Mutex::new(0usize));
    let outcomes = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let mut slots = Vec::new();
    let mut threads = Vec::new();
    for index in 0..config.slots {
        let proxy = FaultProxy::start(server.addr())?;
        let now = Arc::new(Mutex::new(SlotNow::default()));
        let slot_dir = dir.path().join(format!("slot-{index}"));
        std::fs::create_dir_all(&slot_dir)?;
        let run = SlotRun {
            config: config.clone(),
            connect: proxy.connect_string(),
            slot_dir,
            log: log.clone(),
            now: now.clone(),
            stop: stop.clone(),
            started: started.clone(),
            outcomes: outcomes.clone(),
            seed: config.seed.wrapping_add(index as u64 * 7919) | 1,
        };
        threads.push(thread::spawn(move || run.run()));
        slots.push(Slot { proxy, now });
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let client = rt.block_on(LockClient::connect(&server.connect_string()))?;
    let zk = rt.block_on(client.zookeeper())?;
    let lock_dir = format!("/zklock/{LOCK}");

    let mut report = ExecReport::default();
    let outcome = (|| -> Result<(), BoxError> {
        // The first grant's lines, before any fault.
        wait_for(Duration::from_secs(60), "a first grant's lines", || {
            std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)
        })?;
        let mut rng = config.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let faults_from = Instant::now();
        let mut round = 0usize;
        while round == 0 || faults_from.elapsed() < config.duration {
            let mut kinds = ExecFault::ALL.to_vec();
            if round > 0 {
                for i in (1..kinds.len()).rev() {
                    kinds.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
                }
            }
            for kind in kinds {
                // A holder whose command runs, and someone queued behind it.
                let holder = rt.block_on(queue(&zk, &lock_dir, &slots, dir.path(), 2))?;
                let before = tokens(&log);
                let done = inject(kind, &holder, &slots, &rt, &client, &zk, config)?;
                if let Some(note) = done {
                    *report.faults.entry(kind.name().into()).or_default() += 1;
                    say(format!("{}: {note}", kind.name()));
                }
                // The lock goes on: a grant that came after the fault writes.
                wait_for(Duration::from_secs(60), "a grant after the fault", || {
                    tokens(&log).difference(&before).next().is_some()
                })?;
            }
            round += 1;
        }
        Ok(())
    })();
    stop.store(true, Ordering::SeqCst);
    for slot in &slots {
        slot.proxy.pass();
    }
    for thread in threads {
        let _ = thread.join();
    }
    say("slots stopped".into());
    // The raw handle keeps the session open until dropped: first.
    drop(zk);
    rt.block_on(client.close());
    outcome?;

    report.execs = *started.lock().unwrap_or_else(|e| e.into_inner());
    report.outcomes = outcomes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let text = std::fs::read_to_string(&log)?;
    check_log(&text, &mut report);
    say(format!(
        "{} execs, {} grants wrote {} lines; {} lines overlap",
        report.execs, report.grants, report.lines, report.overlap_lines
    ));
    Ok(report)
}

/// The grants' tokens in the log so far.
fn tokens(log: &Path) -> HashSet<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The holder's slot and node path once the lock dir has `at_least` contenders and the holder's
/// command has started (its node file names the first child).
async fn queue(
    zk: &zklock::zk::Client,
    lock_dir: &str,
    slots: &[Slot],
    dir: &Path,
    at_least: usize,
) -> Result<Holder, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut children = zk.list_children(lock_dir).await.unwrap_or_default();
        children.sort_by(|a, b| sequence(a).cmp(sequence(b)));
        if children.len() >= at_least {
            let first = format!("{lock_dir}/{}", children[0]);
            for (index, _) in slots.iter().enumerate() {
                let node = std::fs::read_to_string(dir.join(format!("slot-{index}/node"))).unwrap_or_default();
                if node.trim() == first {
                    return Ok(Holder {
                        slot: index,
                        node: first,
                    });
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no holder with a waiter behind it within 60 s: {children:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lock's holder of the moment.
struct Holder {
    slot: usize,
    node: String,
}

fn sequence(node: &str) -> &str {
    node.rsplit('-').next().unwrap_or(node)
}

/// Injects one fault; a note on what it did, or `None` when it found no target.
fn inject(
    kind: ExecFault,
    holder: &Holder,
    slots: &[Slot],
    rt: &tokio::runtime::Runtime,
    client: &LockClient,
    zk: &zklock::zk::Client,
    config: &ExecConfig,
) -> Result<Option<String>, BoxError> {
    let pid_of = |slot: usize| slots[slot].now.lock().unwrap_or_else(|e| e.into_inner()).pid;
    let note = match kind {
        ExecFault::KillHolder => pid_of(holder.slot).map(|pid| {
            kill(pid);
            format!("SIGKILLed the holder, slot {} (pid {pid})", holder.slot)
        }),
        ExecFault::KillWaiter => {
            // Any slot but the holder's runs a waiting zklock exec (or is between two).
            let waiter = (0..slots.len()).find(|&s| s != holder.slot && pid_of(s).is_some());
            waiter
                .and_then(|slot| pid_of(slot).map(|pid| (slot, pid)))
                .map(|(slot, pid)| {
                    kill(pid);
                    format!("SIGKILLed slot {slot} (pid {pid}), not the holder")
                })
        }
        ExecFault::DeleteNode => match rt.block_on(zk.delete(&holder.node, None)) {
            Ok(()) => Some(format!(
                "deleted the holder's node {} (slot {})",
                holder.node, holder.slot
            )),
            Err(_) => None,
        },
        ExecFault::Revoke => {
            let outcome = rt.block_on(client.revoke(LOCK))?;
            Some(format!("revocation requested: {outcome:?}"))
        }
        ExecFault::PartitionHolder => {
            let proxy = &slots[holder.slot].proxy;
            proxy.blackhole();
            // Until the server has expired the session and deleted the node.
            let gone = wait_for(
                config.session_timeout * 3 + Duration::from_secs(10),
                "the node expired",
                || {
                    rt.block_on(zk.check_stat(&holder.node))
                        .is_ok_and(|stat| stat.is_none())
                },
            );
            proxy.pass();
            gone?;
            Some(format!("partitioned slot {} until its session expired", holder.slot))
        }
    };
    Ok(note)
}

fn kill(pid: u32) {
    // SAFETY: a plain kill(2) of a process this run started.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

/// Polls `done` every 20 ms for at most `bound`.
fn wait_for(bound: Duration, what: &str, mut done: impl FnMut() -> bool) -> Result<(), BoxError> {
    let deadline = Instant::now() + bound;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {bound:?}").into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// One slot: `zklock exec` after `zklock exec` until the run stops.
struct SlotRun {
    config: ExecConfig,
    connect: String,
    slot_dir: PathBuf,
    log: PathBuf,
    now: Arc<Mutex<SlotNow>>,
    stop: Arc<AtomicBool>,
    started: Arc<Mutex<usize>>,
    outcomes: Arc<Mutex<BTreeMap<String, usize>>>,
    seed: u64,
}

impl SlotRun {
    fn run(mut self) {
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(err) = self.once() {
                eprintln!("chaos exec: slot {}: {err}", self.slot_dir.display());
                thread::sleep(Duration::from_millis(200));
            }
        }
    }

    fn once(&mut self) -> Result<(), BoxError> {
        let status_file = self.slot_dir.join("status.json");
        let _ = std::fs::remove_file(&status_file);
        let hold_ms = 50 + next(&mut self.seed) % 350;
        let leave = next(&mut self.seed).is_multiple_of(4);
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.slot_dir.join("zklock.out"))?;
        let mut child: Child = Command::new(&self.config.zklock)
            .args(["--zk", &self.connect, "--timeout", "10s", "--session-timeout"])
            .arg(format!("{}ms", self.config.session_timeout.as_millis()))
            .args(["exec", LOCK, "--lock-delay"])
            .arg(format!("{}ms", self.config.lock_delay.as_millis()))
            .args(["--grace", "5s", "--status-file"])
            .arg(&status_file)
            .args(["--", "sh", "-c", SCRIPT])
            .env("SLOT_DIR", &self.slot_dir)
            .env("LOG", &self.log)
            .env("HOLD", format!("{}.{:03}", hold_ms / 1000, hold_ms % 1000))
            .env("LEAVE", if leave { "1" } else { "0" })
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()?;
        self.now.lock().unwrap_or_else(|e| e.into_inner()).pid = Some(child.id());
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        let deadline = Instant::now() + Duration::from_secs(120);
        let ended = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if self.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
                // The end of the run (or a hung zklock): SIGKILL, which its watchdog turns
                // into the end of its command's group.
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(10));
        };
        self.now.lock().unwrap_or_else(|e| e.into_inner()).pid = None;
        let outcome = match (ended, std::fs::read_to_string(&status_file)) {
            (Some(_), Ok(text)) => serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["outcome"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "unreadable".into()),
            (Some(_), Err(_)) => "killed".into(),
            (None, _) => "stopped".into(),
        };
        *self
            .outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome)
            .or_default() += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{check_log, ExecReport};

    #[test]
    fn a_grant_that_writes_after_the_next_one_began_is_an_overlap() {
        let mut clean = ExecReport::default();
        check_log("a 0\na 1\nb 0\nb 1\nc 0\n", &mut clean);
        assert!(clean.passed(), "{clean:?}");
        assert_eq!((clean.grants, clean.lines), (3, 5));

        let mut overlap = ExecReport::default();
        check_log("a 0\nb 0\na 1\nb 1\n", &mut overlap);
        assert_eq!((overlap.overlap_lines, overlap.overlaps.len()), (2, 2), "{overlap:?}");
        assert!(!overlap.passed());

        let mut backwards = ExecReport::default();
        check_log("b 0\na 0\n", &mut backwards);
        assert_eq!(backwards.tokens_out_of_order.len(), 1, "{backwards:?}");
    }
}
