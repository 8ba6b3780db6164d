//! The `zklock` command's global options and output modes against real ZooKeeper servers:
//! `--namespace`, the `ZKLOCK_*` environment variables (and which of a flag and a variable
//! wins), client certificates for servers that require one, the text form of `locks` and
//! `watch`, and `watch --count`.
//!
//! Every run of the command goes through [`finish`] or [`Watch`]: each has a deadline, kills
//! the process when the test ends, and starts it without the `ZKLOCK_*` variables of the
//! environment the tests run in, so that only what a test sets reaches the command.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

mod cli_support;

use cli_support::bare;
use serde_json::Value;
use zklock_runtime::{LockClient, TlsConfig};
use zklock_testing::{ClientAuth, TestCa, ZkServer};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);
/// The longest a command may run: past the longest `--timeout` given to it, so that the
/// command's own timeout, and its message, come first.
const RUN_LIMIT: Duration = Duration::from_secs(40);

/// The `zklock` command pointed at `zk`, with `args` (and a 10 s `--timeout` unless they
/// give one: the command refuses a flag given twice).
fn zklock(zk: &str, args: &[&str]) -> Command {
    let mut cmd = bare();
    cmd.args(["--zk", zk]);
    if !args.contains(&"--timeout") {
        cmd.args(["--timeout", "10s"]);
    }
    cmd.args(args);
    cmd
}

/// A child process killed when the test ends, also when it panics.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(cmd: &mut Command) -> KillOnDrop {
    KillOnDrop(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zklock"),
    )
}

/// Reads all of `from` on a thread of its own.
fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = from.read_to_end(&mut all);
        all
    })
}

/// Waits for `child` to exit; kills it and fails the test if it is still running after
/// RUN_LIMIT.
async fn exit_of(child: &mut KillOnDrop, what: &str) -> ExitStatus {
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        if let Some(status) = child.0.try_wait().expect("poll zklock") {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} still running after {RUN_LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `cmd` to its end.
async fn finish(cmd: &mut Command) -> Output {
    let what = format!("zklock {:?}", cmd.get_args().collect::<Vec<_>>());
    let mut child = start(cmd);
    let stdout = drain(child.0.stdout.take().unwrap());
    let stderr = drain(child.0.stderr.take().unwrap());
    let status = exit_of(&mut child, &what).await;
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Fails unless the command exited with `code`; says what it printed.
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// The JSON a successful run printed.
fn json_of(out: &Output) -> Value {
    assert_exit(out, 0);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// The lock names `locks --json` listed.
fn names(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {listed}"))
        .iter()
        .map(|row| row["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn raw(connect: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(connect).await.expect("raw client")
}

/// The contender nodes of `dir`, in queue order, once there are `n` of them.
async fn contenders(raw: &zookeeper_client::Client, dir: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + SOON;
    loop {
        let mut now = raw.list_children(dir).await.unwrap_or_default();
        if now.len() == n {
            // Sequence numbers are the last ten characters of a node's name.
            now.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
            return now;
        }
        assert!(Instant::now() < deadline, "{dir} never had {n} contenders: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A running `zklock watch`, read line by line.
struct Watch {
    child: KillOnDrop,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Watch {
    fn start(cmd: &mut Command) -> Watch {
        let mut child = start(cmd);
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let out = child.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Some(drain(child.0.stderr.take().unwrap()));
        Watch { child, lines, stderr }
    }

    /// The next line printed; `None` once the command closed its output.
    async fn next_line(&mut self) -> Option<String> {
        match tokio::time::timeout(SOON, self.lines.recv()).await {
            Ok(line) => line,
            Err(_) => panic!("zklock watch printed nothing for {SOON:?}"),
        }
    }

    async fn line(&mut self) -> String {
        match self.next_line().await {
            Some(line) => line,
            None => panic!("zklock watch ended: {}", self.stderr()),
        }
    }

    /// The next JSON view.
    async fn view(&mut self) -> Value {
        let line = self.line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// The next text view: its heading, then one line per holder and waiter.
    async fn frame(&mut self) -> Vec<String> {
        let heading = self.line().await;
        assert!(heading.starts_with("lock "), "not the heading of a view: {heading:?}");
        let mut frame = vec![heading];
        if let Some(nodes) = node_count(&frame[0]) {
            for _ in 0..nodes {
                let line = self.line().await;
                assert!(line.starts_with("  "), "not a node line: {line:?} after {frame:?}");
                frame.push(line);
            }
        }
        frame
    }

    /// Text views until one `want`s; each must be whole.
    async fn frame_until(&mut self, what: &str, want: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + SOON;
        loop {
            let frame = self.frame().await;
            if want(&frame) {
                return frame;
            }
            assert!(Instant::now() < deadline, "never a view {what}; last {frame:?}");
        }
    }

    /// Waits for the command to exit by itself; returns its status and the lines it printed
    /// that were not read yet.
    async fn exit(&mut self) -> (ExitStatus, Vec<String>) {
        let status = exit_of(&mut self.child, "zklock watch").await;
        let mut rest = Vec::new();
        while let Some(line) = self.next_line().await {
            rest.push(line);
        }
        (status, rest)
    }

    fn stderr(&mut self) -> String {
        let _ = self.child.0.kill();
        self.stderr
            .take()
            .map(|h| String::from_utf8_lossy(&h.join().unwrap()).into_owned())
            .unwrap_or_default()
    }
}

/// How many node lines follow a view's heading (`…: 1 holding, 2 waiting`); `None` for the
/// heading of a lock with no directory.
fn node_count(heading: &str) -> Option<usize> {
    let (_, counts) = heading.rsplit_once(": ")?;
    let (holding, waiting) = counts.split_once(" holding, ")?;
    let waiting = waiting.strip_suffix(" waiting")?;
    Some(holding.parse::<usize>().ok()? + waiting.parse::<usize>().ok()?)
}

/// The columns of a `locks` row (name, recipe, holders, waiters, oldest wait) for `name`.
fn locks_row(text: &str, name: &str) -> Option<Vec<String>> {
    text.lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cols| cols.first().map(String::as_str) == Some(name))
}

/// `--namespace` points every command at another root: locks taken under `/apps/billing`
/// are listed there (JSON and text) and not under the default `/zklock`, and the reverse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_selects_the_root_the_locks_are_listed_from() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let billing = LockClient::builder(&zk)
        .namespace("/apps/billing")
        .identity("billing@pod-1")
        .connect()
        .await
        .unwrap();
    let invoices = billing.mutex("invoices").unwrap().acquire().await.unwrap();
    let second = LockClient::builder(&zk)
        .namespace("/apps/billing")
        .connect()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let lock = second.mutex("invoices").unwrap();
        async move { lock.acquire_timeout(SOON).await.map(drop) }
    });
    contenders(&raw, "/apps/billing/invoices", 2).await;
    let default_client = LockClient::connect(&zk).await.unwrap();
    let catalog = default_client.mutex("catalog").unwrap().acquire().await.unwrap();

    let listed = json_of(&finish(&mut zklock(&zk, &["--namespace", "/apps/billing", "locks", "--json"])).await);
    assert_eq!(names(&listed), ["invoices"], "{listed}");
    assert_eq!(
        (listed[0]["holders"].as_u64(), listed[0]["waiters"].as_u64()),
        (Some(1), Some(1))
    );
    let default = json_of(&finish(&mut zklock(&zk, &["locks", "--json"])).await);
    assert_eq!(names(&default), ["catalog"], "{default}");
    let spelled_out = json_of(&finish(&mut zklock(&zk, &["--namespace", "/zklock", "locks", "--json"])).await);
    assert_eq!(spelled_out, default);

    // The text form: the row of the namespace's lock, nothing of the other namespace.
    let text = finish(&mut zklock(&zk, &["--namespace", "/apps/billing", "locks"])).await;
    assert_exit(&text, 0);
    let text = stdout(&text);
    assert_eq!(
        locks_row(&text, "invoices").unwrap_or_else(|| panic!("no invoices row: {text}"))[..4],
        ["invoices", "mutex", "1", "1"]
    );
    assert!(!text.contains("catalog"), "{text}");
    let text = finish(&mut zklock(&zk, &["locks"])).await;
    assert_exit(&text, 0);
    let text = stdout(&text);
    assert!(locks_row(&text, "catalog").is_some(), "{text}");
    assert!(!text.contains("invoices"), "{text}");
    let empty = finish(&mut zklock(&zk, &["--namespace", "/apps/nothing", "locks"])).await;
    assert_exit(&empty, 0);
    assert_eq!(stdout(&empty), "no locks under /apps/nothing\n");

    // `show` reads the lock under the namespace given, and only there.
    let view = json_of(
        &finish(&mut zklock(
            &zk,
            &["--namespace", "/apps/billing", "show", "invoices", "--json"],
        ))
        .await,
    );
    assert_eq!(view["path"], "/apps/billing/invoices");
    assert_eq!(view["holders"][0]["identity"], "billing@pod-1");
    let elsewhere = finish(&mut zklock(&zk, &["show", "invoices"])).await;
    assert_exit(&elsewhere, 4);
    assert!(stderr(&elsewhere).contains("under /zklock"), "{}", stderr(&elsewhere));

    // A namespace the library refuses is a usage error naming it.
    let relative = finish(&mut zklock(&zk, &["--namespace", "apps", "locks"])).await;
    assert_exit(&relative, 2);
    assert!(
        stderr(&relative).contains("namespace \"apps\""),
        "{}",
        stderr(&relative)
    );

    invoices.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    catalog.release().await.unwrap();
}

/// `ZKLOCK_ZK` is the connect string when `--zk` is not given; `--zk` wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zklock_zk_stands_in_for_zk_and_the_flag_wins() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let client = LockClient::connect(&zk).await.unwrap();
    let guard = client.mutex("reports").unwrap().acquire().await.unwrap();
    let closed = zklock_testing::process::closed_address().to_string();

    let from_env = finish(
        bare()
            .env("ZKLOCK_ZK", &zk)
            .args(["--timeout", "10s", "locks", "--json"]),
    )
    .await;
    assert_eq!(names(&json_of(&from_env)), ["reports"]);

    let flag_wins = finish(
        bare()
            .env("ZKLOCK_ZK", &closed)
            .args(["--zk", &zk, "--timeout", "10s", "locks", "--json"]),
    )
    .await;
    assert_eq!(names(&json_of(&flag_wins)), ["reports"]);

    // The variable alone, naming a port nobody listens on: the variable was used.
    let unreachable = finish(bare().env("ZKLOCK_ZK", &closed).args(["--timeout", "1s", "locks"])).await;
    assert_exit(&unreachable, 3);
    assert!(stderr(&unreachable).contains(&closed), "{}", stderr(&unreachable));

    guard.release().await.unwrap();
}

/// Locks taken with digest credentials carry a `digest` ACL: the command reads them with
/// `--digest` or `ZKLOCK_DIGEST`, is refused (exit code 1) without them, and a flag given
/// with the variable wins over it, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_credentials_come_from_the_flag_or_zklock_digest() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let holder = LockClient::builder(&zk)
        .digest("ops", "secret")
        .identity("vault@pod-1")
        .connect()
        .await
        .unwrap();
    let guard = holder.mutex("vault").unwrap().acquire().await.unwrap();
    let raw = raw(&zk).await;
    raw.auth("digest", b"ops:secret").await.unwrap();
    let (acls, _) = raw.get_acl("/zklock/vault").await.unwrap();
    assert!(
        !acls.is_empty()
            && acls
                .iter()
                .all(|acl| acl.scheme() == "digest" && acl.id().starts_with("ops:")),
        "the lock directory is not protected by ops's digest: {acls:?}"
    );

    let show = ["show", "vault", "--json"];
    let anonymous = finish(&mut zklock(&zk, &show)).await;
    assert_exit(&anonymous, 1);
    assert!(stderr(&anonymous).contains("not authorized"), "{}", stderr(&anonymous));

    let with_flag = finish(&mut zklock(&zk, &[&["--digest", "ops:secret"][..], &show].concat())).await;
    assert_eq!(json_of(&with_flag)["holders"][0]["identity"], "vault@pod-1");
    let with_env = finish(zklock(&zk, &show).env("ZKLOCK_DIGEST", "ops:secret")).await;
    assert_eq!(json_of(&with_env)["holders"][0]["identity"], "vault@pod-1");

    // Flag and variable disagree: the flag is used, whichever of them is right.
    let right_flag =
        finish(zklock(&zk, &[&["--digest", "ops:secret"][..], &show].concat()).env("ZKLOCK_DIGEST", "ops:wrong")).await;
    assert_eq!(json_of(&right_flag)["holders"][0]["identity"], "vault@pod-1");
    let wrong_flag =
        finish(zklock(&zk, &[&["--digest", "ops:wrong"][..], &show].concat()).env("ZKLOCK_DIGEST", "ops:secret")).await;
    assert_exit(&wrong_flag, 1);

    // A malformed variable is refused like the malformed flag.
    let malformed = finish(zklock(&zk, &show).env("ZKLOCK_DIGEST", "ops")).await;
    assert_exit(&malformed, 2);
    assert!(stderr(&malformed).contains("USER:PASSWORD"), "{}", stderr(&malformed));

    guard.release().await.unwrap();
}

/// `ZKLOCK_SASL` authenticates like `--sasl`: right credentials read a lock only the SASL user
/// may read, wrong ones are refused with exit code 1, and `--sasl` wins over the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zklock_sasl_authenticates_like_sasl() {
    let server = ZkServer::builder()
        .sasl_user("ops", "ops-secret")
        .start()
        .expect("ZooKeeper");
    let zk = server.connect_string();
    let holder = LockClient::builder(&zk)
        .sasl_digest("ops", "ops-secret")
        .identity("payroll@pod-1")
        .connect()
        .await
        .unwrap();
    let guard = holder.mutex("payroll").unwrap().acquire().await.unwrap();
    let show = ["show", "payroll", "--json"];

    let anonymous = finish(&mut zklock(&zk, &show)).await;
    assert_exit(&anonymous, 1);
    assert!(stderr(&anonymous).contains("not authorized"), "{}", stderr(&anonymous));
    let with_env = finish(zklock(&zk, &show).env("ZKLOCK_SASL", "ops:ops-secret")).await;
    assert_eq!(json_of(&with_env)["holders"][0]["identity"], "payroll@pod-1");
    let wrong = finish(zklock(&zk, &show).env("ZKLOCK_SASL", "ops:guess")).await;
    assert_exit(&wrong, 1);
    assert!(stderr(&wrong).contains("authentication failed"), "{}", stderr(&wrong));
    let flag_wins =
        finish(zklock(&zk, &[&["--sasl", "ops:ops-secret"][..], &show].concat()).env("ZKLOCK_SASL", "ops:guess")).await;
    assert_eq!(json_of(&flag_wins)["holders"][0]["identity"], "payroll@pod-1");

    guard.release().await.unwrap();
}

/// A server that requires client certificates serves the command given `--tls-cert` and
/// `--tls-key` (or `ZKLOCK_TLS_CERT` and `ZKLOCK_TLS_KEY`, with `ZKLOCK_TLS_CA`); without a
/// certificate the command exits with code 3 saying the server wants one, and half a
/// certificate, or one without a CA, is a usage error (exit code 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_a_client_certificate_is_read_with_one() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let server = ZkServer::builder()
        .tls(&ca)
        .tls_client_auth(ClientAuth::Need)
        .start()
        .expect("ZooKeeper");
    let secure = server.secure_connect_string().unwrap();
    let me = ca.issue("zklock-operator").unwrap();
    let app = ca.issue("orders-api").unwrap();
    let holder = LockClient::builder(&secure)
        .tls(
            TlsConfig::ca_file(ca.cert_file())
                .unwrap()
                .identity_files(app.cert_file(), app.key_file())
                .unwrap(),
        )
        .identity("orders-api@pod-1")
        .connect()
        .await
        .unwrap();
    let guard = holder.mutex("mtls").unwrap().acquire_timeout(SOON).await.unwrap();
    let ca_file = ca.cert_file().to_str().unwrap();
    let cert = me.cert_file().to_str().unwrap();
    let key = me.key_file().to_str().unwrap();
    let show = ["show", "mtls", "--json"];

    let flags = ["--tls-ca", ca_file, "--tls-cert", cert, "--tls-key", key];
    let with_flags = finish(&mut zklock(&secure, &[&flags[..], &show].concat())).await;
    assert_eq!(json_of(&with_flags)["holders"][0]["identity"], "orders-api@pod-1");

    let with_env = finish(
        zklock(&secure, &show)
            .env("ZKLOCK_TLS_CA", ca_file)
            .env("ZKLOCK_TLS_CERT", cert)
            .env("ZKLOCK_TLS_KEY", key),
    )
    .await;
    assert_eq!(json_of(&with_env)["holders"][0]["identity"], "orders-api@pod-1");

    // Without a certificate: the server's refusal is named, with the unreachable code. The
    // longer timeout shows the diagnosis comes first, not a timeout's message.
    let without = finish(&mut zklock(
        &secure,
        &["--timeout", "20s", "--tls-ca", ca_file, "locks"],
    ))
    .await;
    assert_exit(&without, 3);
    assert!(stderr(&without).contains("client certificate"), "{}", stderr(&without));
    let without_env = finish(zklock(&secure, &["--timeout", "20s", "locks"]).env("ZKLOCK_TLS_CA", ca_file)).await;
    assert_exit(&without_env, 3);
    assert!(
        stderr(&without_env).contains("client certificate"),
        "{}",
        stderr(&without_env)
    );

    // Half a certificate, from flags or variables, and a certificate without a CA.
    let no_key = finish(&mut zklock(
        &secure,
        &["--tls-ca", ca_file, "--tls-cert", cert, "locks"],
    ))
    .await;
    assert_exit(&no_key, 2);
    assert!(stderr(&no_key).contains("--tls-key"), "{}", stderr(&no_key));
    let no_cert_env = finish(
        zklock(&secure, &["locks"])
            .env("ZKLOCK_TLS_CA", ca_file)
            .env("ZKLOCK_TLS_KEY", key),
    )
    .await;
    assert_exit(&no_cert_env, 2);
    assert!(stderr(&no_cert_env).contains("--tls-cert"), "{}", stderr(&no_cert_env));
    let no_ca = finish(&mut zklock(&secure, &["--tls-cert", cert, "--tls-key", key, "locks"])).await;
    assert_exit(&no_ca, 2);
    assert!(stderr(&no_ca).contains("need --tls-ca"), "{}", stderr(&no_ca));

    guard.release().await.unwrap();
}

/// `locks` without `--json`: a heading, then one row per lock with its recipe, holders,
/// waiters and oldest wait; and a sentence when there is no lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_text_lists_each_lock_with_its_queue() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;

    let none = finish(&mut zklock(&zk, &["locks"])).await;
    assert_exit(&none, 0);
    assert_eq!(stdout(&none), "no locks under /zklock\n");

    let a = LockClient::connect(&zk).await.unwrap();
    let b = LockClient::connect(&zk).await.unwrap();
    let c = LockClient::connect(&zk).await.unwrap();
    let held = a.mutex("ledger").unwrap().acquire().await.unwrap();
    let waiters: Vec<_> = [&b, &c]
        .into_iter()
        .map(|client| {
            let lock = client.mutex("ledger").unwrap();
            tokio::spawn(async move { lock.acquire_timeout(SOON).await.map(drop) })
        })
        .collect();
    contenders(&raw, "/zklock/ledger", 3).await;
    let read = a.read_lock("catalog").unwrap().acquire().await.unwrap();

    let text = finish(&mut zklock(&zk, &["locks"])).await;
    assert_exit(&text, 0);
    let text = stdout(&text);
    let heading = text.lines().next().unwrap_or_default();
    assert_eq!(
        heading.split_whitespace().collect::<Vec<_>>(),
        ["LOCK", "RECIPE", "HOLDERS", "WAITERS", "OLDEST", "WAIT"],
        "{text}"
    );
    assert_eq!(text.lines().count(), 3, "a heading and two rows: {text}");
    let ledger = locks_row(&text, "ledger").unwrap_or_else(|| panic!("no ledger row: {text}"));
    assert_eq!(ledger[..4], ["ledger", "mutex", "1", "2"], "{text}");
    assert!(
        ledger[4] != "-" && ledger[4].ends_with('s'),
        "the oldest wait's age: {text}"
    );
    let catalog = locks_row(&text, "catalog").unwrap_or_else(|| panic!("no catalog row: {text}"));
    assert_eq!(catalog, ["catalog", "read_write", "1", "0", "-"], "{text}");
    // Sorted by name.
    assert!(text.find("catalog").unwrap() < text.find("ledger").unwrap(), "{text}");

    let filtered = finish(&mut zklock(&zk, &["locks", "--prefix", "led"])).await;
    assert_exit(&filtered, 0);
    let filtered = stdout(&filtered);
    assert!(
        locks_row(&filtered, "ledger").is_some() && !filtered.contains("catalog"),
        "{filtered}"
    );

    drop(read);
    held.release().await.unwrap();
    for waiter in waiters {
        // Each waiter in turn gets the lock and lets it go.
        waiter.await.unwrap().unwrap();
    }
}

/// `watch` without `--json` on a pipe prints one text view per change, without terminal
/// control codes: the lock, its recipe and counts, then a line per holder and waiter naming
/// who it is, its token, and whom a waiter waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_text_names_the_lock_the_holder_and_the_waiters() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let mut watch = Watch::start(&mut zklock(&zk, &["watch", "ledger"]));
    assert_eq!(
        watch.frame().await,
        ["lock ledger: no holder, no waiter (waiting for one)"]
    );

    let first = LockClient::builder(&zk)
        .identity("billing@pod-1")
        .connect()
        .await
        .unwrap();
    let second = LockClient::builder(&zk)
        .identity("billing@pod-2")
        .connect()
        .await
        .unwrap();
    let guard = first.mutex("ledger").unwrap().acquire().await.unwrap();
    let token = guard.fencing_token().to_string();
    let held = watch
        .frame_until("with one holder", |f| f[0].ends_with("1 holding, 0 waiting"))
        .await;
    assert_eq!(held[0], "lock ledger (/zklock/ledger), mutex: 1 holding, 0 waiting");
    let waiting = tokio::spawn({
        let lock = second.mutex("ledger").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    let queue = contenders(&raw, "/zklock/ledger", 2).await;
    let frame = watch
        .frame_until("with a holder and a waiter", |f| f[0].ends_with("1 holding, 1 waiting"))
        .await;
    assert_eq!(frame[0], "lock ledger (/zklock/ledger), mutex: 1 holding, 1 waiting");
    let (first_node, second_node) = (queue[0].as_str(), queue[1].as_str());
    let holder_line: Vec<&str> = frame[1].split_whitespace().collect();
    assert_eq!(
        holder_line,
        [
            "HOLDS",
            "exclusive",
            first_node,
            "zklock",
            "billing@pod-1",
            "age",
            holder_line[6],
            "token",
            &token
        ],
        "{frame:?}"
    );
    let waiter_line: Vec<&str> = frame[2].split_whitespace().collect();
    assert_eq!(
        waiter_line[..5],
        ["waits", "exclusive", second_node, "zklock", "billing@pod-2"],
        "{frame:?}"
    );
    assert_eq!(
        waiter_line[7..],
        ["token", waiter_line[8], "waits", "for", first_node],
        "{frame:?}"
    );
    assert!(
        frame.iter().all(|l| !l.contains('\x1b')),
        "control codes on a pipe: {frame:?}"
    );

    // The lock passes on: the second client is shown holding it, alone.
    guard.release().await.unwrap();
    let passed = watch
        .frame_until("with the second client holding", |f| {
            f.len() == 2 && f[1].contains("billing@pod-2") && f[1].trim_start().starts_with("HOLDS")
        })
        .await;
    assert!(passed[0].ends_with("1 holding, 0 waiting"), "{passed:?}");
    assert!(!passed.iter().any(|l| l.contains("billing@pod-1")), "{passed:?}");
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// `watch --count N` prints exactly N views, one per change, and exits by itself with code 0,
/// in JSON (one line per view) and in text (one heading per view).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_count_stops_after_that_many_views() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let client = LockClient::connect(&zk).await.unwrap();
    let lock = client.mutex("gate").unwrap();

    // One view: printed at once, no change needed.
    let mut once = Watch::start(&mut zklock(&zk, &["watch", "gate", "--json", "--count", "1"]));
    assert_eq!(once.view().await["exists"], false);
    let (status, rest) = once.exit().await;
    assert_eq!((status.code(), rest), (Some(0), Vec::<String>::new()));

    // Three views; each change is made after the previous view was printed, so the watch
    // the command set when reading it sees the change.
    let mut three = Watch::start(&mut zklock(&zk, &["watch", "gate", "--json", "--count", "3"]));
    assert_eq!(three.view().await["exists"], false);
    let guard = lock.acquire().await.unwrap();
    let second = three.view().await;
    guard.release().await.unwrap();
    let third = three.view().await;
    // More changes after the last view print nothing more.
    let again = lock.acquire().await.unwrap();
    contenders(&raw, "/zklock/gate", 1).await;
    let (status, rest) = three.exit().await;
    assert_eq!(status.code(), Some(0), "{}", three.stderr());
    assert!(rest.is_empty(), "printed past --count 3: {rest:?}");
    for view in [&second, &third] {
        assert_eq!(view["name"], "gate", "{view}");
    }
    again.release().await.unwrap();

    // Text: two views, each a heading (and its node lines).
    let mut text = Watch::start(&mut zklock(&zk, &["watch", "gate", "--count", "2"]));
    let before = text.frame().await;
    let guard = lock.acquire().await.unwrap();
    let after = text.frame().await;
    let (status, rest) = text.exit().await;
    assert_eq!(status.code(), Some(0), "{}", text.stderr());
    assert!(rest.is_empty(), "printed past --count 2: {rest:?}");
    assert!(
        before[0].starts_with("lock gate") && after[0].starts_with("lock gate"),
        "{before:?} {after:?}"
    );
    guard.release().await.unwrap();

    // No view at all is not a count: refused as a usage error naming the flag.
    let zero = finish(&mut zklock(&zk, &["watch", "gate", "--count", "0"])).await;
    assert_exit(&zero, 2);
    assert!(stderr(&zero).contains("--count"), "{}", stderr(&zero));
    assert_eq!(stdout(&zero), "");
}
