//! A throw-away Prometheus server in a child process: [`PrometheusServer`].
//!
//! The binary is `$PROMETHEUS` when set, else `prometheus` from Debian's `prometheus` package
//! (`/usr/bin/prometheus`) or from `PATH`. Each server runs in a temporary directory of its own
//! (configuration, rule files, storage, log), on a free loopback port, as a child process tied
//! to this one: it is killed when the handle is dropped (also while a test unwinds from a
//! panic) and when this process dies. The packaged service is never used.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::error::TestingError;
use super::java::{spawn_tied_to_process, tail_of_file};
use super::ports::free_port;
use super::server::KEEP_DIRS_ENV;
use super::startup::wait_ready;

/// Names the `prometheus` binary to run instead of searching for it.
const BINARY_ENV: &str = "PROMETHEUS";
/// Where Debian's `prometheus` package puts the binary.
const DEBIAN_BINARY: &str = "/usr/bin/prometheus";
/// How long the server may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one HTTP request to the server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a start is retried on a fresh port when another process took the port first.
const PORT_ATTEMPTS: usize = 3;
/// Lines of server log quoted in errors.
const LOG_LINES_IN_ERRORS: usize = 30;

/// What a [`PrometheusServer`] scrapes and evaluates.
///
/// ```no_run
/// use std::time::Duration;
/// let server = zklock_testing::PrometheusServer::builder()
///     .scrape("127.0.0.1:9100")
///     .rule_file("observability/rules.yml")
///     .interval(Duration::from_secs(1))
///     .start()?;
/// let answer = server.query("up")?; // the API's JSON answer
/// # let _ = answer;
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PrometheusServerBuilder {
    targets: Vec<String>,
    rule_files: Vec<PathBuf>,
    interval: Duration,
}

impl PrometheusServerBuilder {
    /// Scrapes `GET /metrics` of `target` (`host:port`).
    #[must_use]
    pub fn scrape(mut self, target: impl Into<String>) -> Self {
        self.targets.push(target.into());
        self
    }

    /// Loads the rules of `path` (copied into the server's directory at start).
    #[must_use]
    pub fn rule_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.rule_files.push(path.into());
        self
    }

    /// How often targets are scraped and rules evaluated (default 1 s).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Starts the server and waits until it is ready.
    ///
    /// # Errors
    ///
    /// [`TestingError::PrometheusNotInstalled`] when no `prometheus` binary is found (run
    /// `scripts/install-deps.sh`); [`TestingError::Exited`] or [`TestingError::StartTimeout`]
    /// with the log when it fails to come up (a rule file it refuses, for one).
    pub fn start(self) -> Result<PrometheusServer, TestingError> {
        let binary = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-prometheus-")
            .disable_cleanup(std::env::var_os(KEEP_DIRS_ENV).is_some())
            .tempdir()
            .map_err(|e| TestingError::io("create a temporary Prometheus directory", e))?;
        let mut rules = Vec::new();
        for (i, source) in self.rule_files.iter().enumerate() {
            let copy = dir.path().join(format!("rules-{i}.yml"));
            std::fs::copy(source, &copy).map_err(|e| TestingError::io(format!("copy {}", source.display()), e))?;
            rules.push(copy);
        }
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, self.config(&rules))
            .map_err(|e| TestingError::io(format!("write {}", config.display()), e))?;
        let mut server = PrometheusServer {
            name: String::new(),
            port: 0,
            dir,
            child: Mutex::new(None),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            server.name = format!("Prometheus server 127.0.0.1:{}", server.port);
            match server.run(&binary, &config) {
                Ok(()) => return Ok(server),
                // Another process took the free port first: again, on a fresh one.
                Err(e)
                    if attempt < PORT_ATTEMPTS
                        && server.log_tail(LOG_LINES_IN_ERRORS).contains("address already in use") =>
                {
                    server.kill();
                    tracing::debug!("retrying on a fresh port: {e}");
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn config(&self, rules: &[PathBuf]) -> String {
        let seconds = self.interval.as_secs_f64().max(0.1);
        let mut text = format!(
            "global:\n  scrape_interval: {seconds}s\n  evaluation_interval: {seconds}s\n  scrape_timeout: {seconds}s\n"
        );
        text.push_str("rule_files:\n");
        for rule in rules {
            text.push_str(&format!("  - {:?}\n", rule.display().to_string()));
        }
        text.push_str("scrape_configs:\n  - job_name: zklock\n    static_configs:\n      - targets: [");
        let targets: Vec<String> = self.targets.iter().map(|t| format!("{t:?}")).collect();
        text.push_str(&targets.join(", "));
        text.push_str("]\n");
        text
    }
}

/// A throw-away Prometheus server on a free loopback port. Dropping the handle kills it and
/// removes its directory.
#[derive(Debug)]
pub struct PrometheusServer {
    name: String,
    port: u16,
    dir: TempDir,
    child: Mutex<Option<Child>>,
}

impl PrometheusServer {
    /// A server to configure: nothing scraped, no rules, a 1 s interval.
    pub fn builder() -> PrometheusServerBuilder {
        PrometheusServerBuilder {
            targets: Vec::new(),
            rule_files: Vec::new(),
            interval: Duration::from_secs(1),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The address of its HTTP API.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The answer of `GET /api/v1/query?query=EXPR` (JSON text), whatever its status.
    ///
    /// # Errors
    ///
    /// [`TestingError::Io`] when the server cannot be reached or answers no HTTP.
    pub fn query(&self, expr: &str) -> Result<String, TestingError> {
        self.get(&format!("/api/v1/query?query={}", encode(expr)))
    }

    /// The answer of `GET /api/v1/query_range` over `[start, end]` (Unix seconds) with `step`
    /// seconds between points (JSON text).
    ///
    /// # Errors
    ///
    /// As [`query`](Self::query).
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Result<String, TestingError> {
        self.get(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(expr)
        ))
    }

    /// The body of `GET path` (for example `/api/v1/alerts`, `/api/v1/rules`, `/api/v1/targets`).
    ///
    /// # Errors
    ///
    /// As [`query`](Self::query).
    pub fn get(&self, path: &str) -> Result<String, TestingError> {
        http_get(self.addr(), path).map(|(_, body)| body)
    }

    /// The directory holding the server's configuration, storage and log (`server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path(), lines)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Kills the server (SIGKILL) and reaps it.
    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn run(&self, binary: &Path, config: &Path) -> Result<(), TestingError> {
        let log = self.log_path();
        let log_file = File::create(&log).map_err(|e| TestingError::io(format!("create {}", log.display()), e))?;
        let stderr = log_file
            .try_clone()
            .map_err(|e| TestingError::io("duplicate the log file handle", e))?;
        let mut command = Command::new(binary);
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--storage.tsdb.retention.time=1h")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(stderr));
        let child =
            spawn_tied_to_process(command).map_err(|e| TestingError::io(format!("spawn {}", binary.display()), e))?;
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        wait_ready(
            &self.name,
            Instant::now() + START_TIMEOUT,
            Duration::from_millis(50),
            || {
                let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
                let status = child.as_mut()?.try_wait().ok().flatten()?;
                Some(status.to_string())
            },
            || http_get(self.addr(), "/-/ready").is_ok_and(|(status, _)| status == 200),
            || self.log_tail(LOG_LINES_IN_ERRORS),
        )
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        // Killed before the directory is removed.
        self.kill();
    }
}

/// Percent-encodes `text` for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` over HTTP/1.1 with `Connection: close`: the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), TestingError> {
    let io = |what: &str, e: std::io::Error| TestingError::io(format!("{what} http://{addr}{path}"), e);
    let mut stream = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT).map_err(|e| io("connect to", e))?;
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| io("time out", e))?;
    stream
        .set_write_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| io("time out", e))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept-Encoding: identity\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| io("send", e))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(|e| io("read", e))?;
    let answer = String::from_utf8_lossy(&answer);
    let bad = || {
        io(
            "parse",
            std::io::Error::other(format!("not an HTTP answer: {answer:.200}")),
        )
    };
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(bad)?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(bad)?
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

/// The body of a chunked transfer.
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// `$PROMETHEUS`, Debian's binary, or `prometheus` on `PATH`.
fn find_binary() -> Result<PathBuf, TestingError> {
    super::binaries::find_binary(BINARY_ENV, DEBIAN_BINARY, "prometheus")
        .map_err(|searched| TestingError::PrometheusNotInstalled { searched })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_queries_and_dies_with_its_handle() {
        let server = PrometheusServer::builder().start().unwrap_or_else(|e| panic!("{e}"));
        let answer = server.query("1 + 1").expect("query");
        assert!(
            answer.contains(r#""status":"success""#) && answer.contains(r#""2""#),
            "{answer}"
        );
        let refused = server.query("sum(").expect("query");
        assert!(refused.contains(r#""status":"error""#), "{refused}");
        let pid = server.child.lock().unwrap().as_ref().expect("running").id();
        let dir = server.dir().to_owned();
        drop(server);
        // SAFETY: signal 0 only checks that the pid exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        assert!(!alive, "the server outlived its handle");
        assert!(!dir.exists() || std::env::var_os(KEEP_DIRS_ENV).is_some());
    }

    #[test]
    fn text_is_encoded_for_a_query_string() {
        assert_eq!(encode(r#"up{job="a b"}"#), "up%7Bjob%3D%22a%20b%22%7D");
    }

    #[test]
    fn a_chunked_body_is_put_back_together() {
        assert_eq!(
            dechunk("4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n").as_deref(),
            Some("Wikipedia")
        );
        assert_eq!(dechunk("zz\r\n"), None);
    }
}
