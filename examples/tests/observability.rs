//! The shipped rules and dashboard (`observability/`) against a real Prometheus server scraping
//! real processes: two seckill service instances selling under the lock, two `singleton_job`
//! processes running one job, and this test's own process, which leads an election group, has
//! a second candidate waiting, and suffers the faults.
//!
//! The instances and job processes are this test binary run again with only the ignored test
//! `observed_process` selected; it runs the very code of `--example seckill serve` and
//! `--example singleton_job`, and exits when its standard input closes (so nothing outlives
//! the test, even one killed outright).
//!
//! Checked: Prometheus loads every rule without error; every dashboard panel's expression
//! (its variables set to match anything) returns series, as does every recording rule and every
//! metric selector of every alert; an operator deleting a holder's node makes `ZklockLockLost`
//! fire, and work blocked past its `max_hold` makes `ZklockHoldPastMax` pending (its `for:` is
//! minutes). With `ZKLOCK_DRAW_DASHBOARD=FILE`, the main panels are drawn into FILE as SVG from
//! the range queries' results (docs/observability-dashboard.svg is one such drawing).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use zklock::testing::{PrometheusServer, ZkServer};
use zklock::LockClient;
use zklock_examples::metrics::{serve_metrics, METRICS_LISTENING};
use zklock_examples::seckill::driver::LISTENING as SECKILL_LISTENING;

const ROLE_ENV: &str = "OBSERVABILITY_E2E_ROLE";
const ARGS_ENV: &str = "OBSERVABILITY_E2E_ARGS";
/// The job both `singleton_job` processes run.
const JOB: &str = "nightly-report";

/// Not a test: the body of a process the end-to-end test starts (a seckill instance or a
/// singleton job node). Run by hand it finds no role and fails.
#[test]
#[ignore = "a process started by the observability end-to-end test"]
fn observed_process() {
    let role = std::env::var(ROLE_ENV).expect("started by the end-to-end test, which sets the role");
    let args: Vec<String> = serde_json::from_str(&std::env::var(ARGS_ENV).expect("arguments")).expect("JSON");
    // Ends with the test: its standard input closes when the test drops (or loses) the child.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let argv = std::iter::once(role.clone()).chain(args);
    match role.as_str() {
        "seckill" => {
            #[derive(clap::Parser)]
            struct Serve {
                #[command(flatten)]
                args: zklock_examples::seckill::service::ServeArgs,
            }
            let serve = <Serve as clap::Parser>::parse_from(argv);
            runtime
                .block_on(zklock_examples::seckill::service::serve(serve.args))
                .expect("serve");
        }
        "singleton_job" => {
            let args = <zklock_examples::singleton_job::Args as clap::Parser>::parse_from(argv);
            runtime
                .block_on(zklock_examples::singleton_job::run(args))
                .expect("singleton job");
        }
        other => panic!("unknown role {other}"),
    }
}

/// A process of this test, killed when dropped.
struct Observed {
    child: Child,
    /// Where it serves `/metrics` (`host:port`).
    target: String,
    log: PathBuf,
}

impl Observed {
    /// Starts `role` with `args` and waits for the line that names its metrics address.
    fn start(role: &str, args: &[String], marker: &'static str, log: PathBuf) -> Observed {
        let mut command: Command = zklock::testing::process::rerun_test("observed_process").expect("test binary");
        command
            .env(ROLE_ENV, role)
            .env(ARGS_ENV, serde_json::to_string(args).unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
        let mut child = command.spawn().expect("spawn");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(marker) {
                    let _ = tx.send(line[at + marker.len()..].trim().to_owned());
                }
            }
        });
        let mut observed = Observed {
            child,
            target: String::new(),
            log,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => observed.target = addr,
            Err(_) => panic!("{role} did not start; its log:\n{}", observed.log_text()),
        }
        observed
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The result of an instant query (failing on an error answer).
fn query(prometheus: &PrometheusServer, expr: &str) -> Vec<Value> {
    let answer = prometheus.query(expr).expect("Prometheus answers");
    let answer: Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(answer["status"], "success", "{expr}: {answer}");
    answer["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Waits (at most `within`) for `expr` to return series; the last answer when it never did.
async fn series_of(prometheus: &PrometheusServer, expr: &str, within: Duration) -> Result<Vec<Value>, String> {
    let deadline = Instant::now() + within;
    loop {
        let result = query(prometheus, expr);
        if !result.is_empty() {
            return Ok(result);
        }
        if Instant::now() >= deadline {
            return Err(format!("{expr} returned no series within {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The metric selectors in a PromQL expression: each `zklock_…` or `zklock:…` name with its
/// label matchers, if any.
fn selectors(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("zklock") {
        let before = rest[..at].chars().last();
        let tail = &rest[at..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let mut selector = tail[..name_len].to_owned();
        let after = &tail[name_len..];
        let mut used = name_len;
        if after.starts_with('{') {
            let close = after.find('}').expect("matchers close");
            selector.push_str(&after[..=close]);
            used += close + 1;
        }
        // Not part of a longer word (a label value or another name).
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '"') && !found.contains(&selector) {
            found.push(selector);
        }
        rest = &tail[used..];
    }
    found
}

/// Every panel of the dashboard: its title and expressions, variables set to match anything.
fn dashboard_panels() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(repo_file("observability/dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    let mut stack: Vec<Value> = dashboard["panels"].as_array().unwrap().clone();
    while let Some(panel) = stack.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            stack.extend(inner.iter().cloned());
        }
        let exprs: Vec<String> = panel["targets"]
            .as_array()
            .map(|targets| {
                targets
                    .iter()
                    .filter_map(|t| t["expr"].as_str())
                    .map(|e| {
                        ["$instance", "$lock", "$group", "$job_name"]
                            .iter()
                            .fold(e.to_owned(), |e, var| e.replace(var, ".*"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !exprs.is_empty() {
            out.push((panel["title"].as_str().unwrap_or("?").to_owned(), exprs));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_and_alert_has_data_and_real_faults_raise_alerts() {
    let started = unix_now();
    let work = tempfile::tempdir().unwrap();
    let zk = tokio::task::spawn_blocking(ZkServer::start).await.unwrap().unwrap();
    let connect = zk.connect_string();

    // Two seckill instances on one SQLite file, caching their item locks.
    let database = zklock_examples::seckill::store::sqlite_url(&work.path().join("seckill.db"));
    let serve = |i: usize| {
        let args: Vec<String> = [
            "--listen",
            "127.0.0.1:0",
            "--zk",
            &connect,
            "--database",
            &database,
            "--lock-cache",
            "5s",
            "--exit-with-stdin",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Observed::start(
            "seckill",
            &args,
            SECKILL_LISTENING,
            work.path().join(format!("seckill-{i}.log")),
        )
    };
    let shops = [serve(0), serve(1)];
    // Two nodes of one singleton job, a run every second.
    let node = |i: usize| {
        let args: Vec<String> = [
            "--zk",
            &connect,
            "--name",
            JOB,
            "--schedule",
            "* * * * * *",
            "--work-ms",
            "100",
            "--metrics",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Observed::start(
            "singleton_job",
            &args,
            METRICS_LISTENING,
            work.path().join(format!("job-{i}.log")),
        )
    };
    let nodes = [node(0), node(1)];

    // This process: a leader and a waiting candidate of one group, and the faults below.
    let own = serve_metrics("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let _own_server = own.0;
    let client = LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let other = LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let leadership = client.election("compactor").unwrap().lead().await.unwrap();
    let candidate = other.election("compactor").unwrap();
    let waiting = tokio::spawn(async move { candidate.lead().await });

    let mut prometheus = PrometheusServer::builder().rule_file(repo_file("observability/rules.yml"));
    let targets: Vec<String> = shops
        .iter()
        .chain(&nodes)
        .map(|o| o.target.clone())
        .chain([own.1.to_string()])
        .collect();
    for target in &targets {
        prometheus = prometheus.scrape(target.clone());
    }
    let prometheus = tokio::task::spawn_blocking(move || prometheus.start())
        .await
        .unwrap()
        .unwrap();

    // Load: items sold through both instances.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let base = |i: usize| format!("http://{}", shops[i].target);
    let created = http
        .post(format!("{}/items", base(0)))
        .json(&json!({ "id": 1, "stock": 1000 }))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{:?}", created.text().await);
    // Twenty in a row through each instance: all but the first of each run from its cache.
    for n in 0..40 {
        let bought = http
            .post(format!("{}/items/1/buy", base(n / 20)))
            .json(&json!({ "request_id": format!("req-{n}"), "qty": 1 }))
            .send()
            .await
            .unwrap();
        assert!(bought.status().is_success(), "{:?}", bought.text().await);
    }

    // Every rule loaded and evaluates without error.
    let rules: Value = serde_json::from_str(&prometheus.get("/api/v1/rules").unwrap()).unwrap();
    let mut alerting = Vec::new();
    let mut recording = Vec::new();
    for group in rules["data"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["name"].as_str().unwrap().to_owned();
            let expr = rule["query"].as_str().unwrap().to_owned();
            match rule["type"].as_str() {
                Some("alerting") => alerting.push((name, expr)),
                _ => recording.push((name, expr)),
            }
        }
    }
    assert!(alerting.len() >= 12 && recording.len() >= 6, "{rules}");

    // Every scrape target up, and the job has succeeded somewhere.
    let up = series_of(
        &prometheus,
        &format!("count(up == 1) == {}", targets.len()),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        up.is_ok(),
        "targets not all up: {}",
        prometheus.get("/api/v1/targets").unwrap()
    );
    // The instances' item locks were granted from their caches: the "Acquisitions /s" panel's
    // line for them has something to show.
    let cached = series_of(
        &prometheus,
        "sum(zklock_granted_from_cache_total) > 0",
        Duration::from_secs(60),
    )
    .await;
    assert!(cached.is_ok(), "{cached:?}");
    let ran = series_of(
        &prometheus,
        &format!("zklock_job_last_success_timestamp_seconds{{job_name=\"{JOB}\"}} > 0"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        ran.is_ok(),
        "{ran:?}; node logs:\n{}\n{}",
        nodes[0].log_text(),
        nodes[1].log_text()
    );

    // The faults. An operator deletes the node of a hold: the holder loses it and releases it.
    let ledger = client.mutex("ledger").unwrap().with_template("ledger");
    let held = ledger.acquire().await.unwrap();
    // Its counters were registered at 0 with this first wait; a rate needs Prometheus to have
    // seen the 0 before the loss (as it has, in a process that ran a while before one).
    let seen = series_of(
        &prometheus,
        r#"zklock_lost_total{lock="ledger"} == 0"#,
        Duration::from_secs(30),
    )
    .await;
    assert!(seen.is_ok(), "{seen:?}");
    let raw = zklock::zk::Client::connector()
        .connect(&connect)
        .await
        .expect("a raw session");
    raw.delete(held.node_path(), None)
        .await
        .expect("delete the holder's node");
    let lost = tokio::time::timeout(Duration::from_secs(20), held.lost()).await;
    assert!(lost.is_ok(), "the holder never learnt its node was deleted");
    assert!(held.release().await.is_err(), "a lost hold released as if held");
    // Work blocked past its max_hold.
    let report = client.mutex("report").unwrap().with_template("report");
    let guard = report.acquire().await.unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let blocked = tokio::spawn(async move {
        let outcome = guard
            .run_for(Duration::from_millis(500), async move {
                let _ = go_rx.recv_timeout(Duration::from_secs(120));
            })
            .await;
        drop(guard);
        outcome
    });

    // Panels, recording rules and alert selectors all have data (rates need two scrapes, so
    // each gets a while).
    let mut missing = Vec::new();
    for (title, exprs) in dashboard_panels() {
        for expr in exprs {
            if let Err(why) = series_of(&prometheus, &expr, Duration::from_secs(30)).await {
                missing.push(format!("panel {title:?}: {why}"));
            }
        }
    }
    for (name, _) in &recording {
        if let Err(why) = series_of(&prometheus, name, Duration::from_secs(30)).await {
            missing.push(format!("recording rule: {why}"));
        }
    }
    for (name, expr) in &alerting {
        for selector in selectors(expr) {
            if let Err(why) = series_of(&prometheus, &selector, Duration::from_secs(30)).await {
                missing.push(format!("alert {name}: {why}"));
            }
        }
    }
    assert!(missing.is_empty(), "no data for:\n{}", missing.join("\n"));

    // The faults raise their alerts.
    let firing = series_of(
        &prometheus,
        r#"ALERTS{alertname="ZklockLockLost",alertstate="firing",lock="ledger"}"#,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        firing.is_ok(),
        "{firing:?}; alerts: {}",
        prometheus.get("/api/v1/alerts").unwrap()
    );
    let pending = series_of(
        &prometheus,
        r#"ALERTS{alertname="ZklockHoldPastMax",lock="report"}"#,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        pending.is_ok(),
        "{pending:?}; alerts: {}",
        prometheus.get("/api/v1/alerts").unwrap()
    );
    // Nothing else pages while the system is healthy otherwise.
    let paging = query(&prometheus, r#"ALERTS{alertstate="firing",severity="page"}"#);
    let unexpected: Vec<&Value> = paging
        .iter()
        .filter(|a| a["metric"]["alertname"] != "ZklockLockLost")
        .collect();
    assert!(unexpected.is_empty(), "unexpected pages: {unexpected:?}");

    if let Some(file) = std::env::var_os("ZKLOCK_DRAW_DASHBOARD") {
        draw::dashboard(&prometheus, started, unix_now(), Path::new(&file));
    }
    go_tx.send(()).unwrap();
    blocked.await.unwrap().expect("work that ended on its own is not cut");
    leadership.release().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), waiting).await;
    client.close().await;
    other.close().await;
}

#[test]
fn selectors_are_found_in_an_expression() {
    let expr = r#"(time() - max by (job_name) (zklock_job_last_success_timestamp_seconds > 0)) > 3 * max by (job_name) (zklock:job_period{job_name=~"a.*"}) unless zklock_job_paused"#;
    assert_eq!(
        selectors(expr),
        [
            "zklock_job_last_success_timestamp_seconds",
            r#"zklock:job_period{job_name=~"a.*"}"#,
            "zklock_job_paused"
        ]
    );
    assert!(selectors(r#"up{job="zklock"}"#).is_empty());
}

/// Draws the dashboard's main panels from range queries, as SVG line charts.
mod draw {
    use std::fmt::Write as _;
    use std::path::Path;

    use serde_json::Value;
    use zklock::testing::PrometheusServer;

    const PANELS: &[(&str, &str, &str)] = &[
        ("Locks held", "sum by (lock) (zklock_locks_held{kind!=\"leader\"})", ""),
        ("Lock wait p99", "zklock:lock_wait_seconds:p99", "s"),
        (
            "Acquisitions / s",
            "sum by (lock) (rate(zklock_acquired_total[1m]))",
            "/s",
        ),
        (
            "Locks lost (10m)",
            "sum by (lock) (increase(zklock_lost_total[10m]))",
            "",
        ),
        ("Leaders per group", "zklock:leaders", ""),
        ("Sessions by state", "sum by (state) (zklock_sessions)", ""),
        ("Job: since last success", "zklock:job_last_success_age_seconds", "s"),
        (
            "Job runs / s by outcome",
            "sum by (outcome) (rate(zklock_job_runs_total[1m]))",
            "/s",
        ),
    ];

    pub fn dashboard(prometheus: &PrometheusServer, start: f64, end: f64, file: &Path) {
        let (w, h, cols) = (360.0, 170.0, 2usize);
        let rows = PANELS.len().div_ceil(cols);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"#111217\"/>\n",
            w * cols as f64 + 10.0,
            h * rows as f64 + 10.0
        );
        let colours = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9", "#f2495c"];
        for (i, (title, expr, unit)) in PANELS.iter().enumerate() {
            let (x0, y0) = (10.0 + (i % cols) as f64 * w, 10.0 + (i / cols) as f64 * h);
            let answer = prometheus.query_range(expr, start, end, 2.0).unwrap_or_default();
            let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
            let series = answer["data"]["result"].as_array().cloned().unwrap_or_default();
            let points: Vec<Vec<(f64, f64)>> = series
                .iter()
                .map(|s| {
                    s["values"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.parse::<f64>().ok()?)))
                        .filter(|(_, y)| y.is_finite())
                        .collect()
                })
                .collect();
            let top = points.iter().flatten().map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9);
            let (pw, ph) = (w - 20.0, h - 50.0);
            let _ = write!(
                svg,
                "<rect x=\"{x0}\" y=\"{y0}\" width=\"{}\" height=\"{}\" fill=\"#181b1f\" stroke=\"#2c3235\"/>\n<text x=\"{}\" y=\"{}\" fill=\"#ccccdc\" font-weight=\"bold\">{title}</text>\n<text x=\"{}\" y=\"{}\" fill=\"#8e8e8e\" text-anchor=\"end\">max {:.3}{unit}</text>\n",
                w - 10.0,
                h - 10.0,
                x0 + 8.0,
                y0 + 16.0,
                x0 + w - 18.0,
                y0 + 16.0,
                top
            );
            for (k, line) in points.iter().enumerate() {
                let path: Vec<String> = line
                    .iter()
                    .map(|(t, y)| {
                        let x = x0 + 5.0 + (t - start) / (end - start).max(1.0) * (pw - 5.0);
                        let y = y0 + 25.0 + ph - y / top * ph;
                        format!("{x:.1},{y:.1}")
                    })
                    .collect();
                let _ = writeln!(
                    svg,
                    "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
                    colours[k % colours.len()],
                    path.join(" ")
                );
                let label = series[k]["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    svg,
                    "<text x=\"{}\" y=\"{}\" fill=\"{}\" font-size=\"9\">{}</text>",
                    x0 + 8.0 + (k % 3) as f64 * 110.0,
                    y0 + h - 16.0 - (k / 3) as f64 * 10.0,
                    colours[k % colours.len()],
                    label.replace('&', "&amp;").replace('<', "&lt;")
                );
            }
        }
        svg.push_str("</svg>\n");
        std::fs::write(file, svg).expect("write the drawing");
    }
}
