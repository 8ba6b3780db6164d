//! End-to-end tests of the seckill example (issue #6) against a real ZooKeeper and a real
//! database. Every test runs twice: on a SQLite file, and (the test whose name ends in
//! `_on_postgres`) on a throw-away PostgreSQL server of its own ([`PgServer`]), through one
//! shared body that takes the [`Backend`].
//!
//! The demo scenario runs here at a smaller size (300 requests for 30 units, 3 instances).
//! The instances are separate processes, as in the demo: this test binary re-runs itself with
//! only the ignored test `seckill_instance_process` selected, which serves one instance (the
//! demo binary does the same with its `serve` subcommand). Each instance has its own
//! ZooKeeper session; all share one database.
//!
//! The bad-input and unavailability tests run the service in-process, on a free port.
//!
//! The last test is the smoke test of the benchmark's seckill section, which runs the same
//! instance processes under each lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zklock::testing::{FaultProxy, PgServer, ZkServer};
use zklock::LockClient;

use zklock_examples::seckill::driver::{self, DemoArgs, Launcher, Summary};
use zklock_examples::seckill::front::Route;
use zklock_examples::seckill::service::{self, Inventory, LockArgs, LockKind, ServeArgs};
use zklock_examples::seckill::store::{sqlite_url, Backend, Placed, Store, StoreError};

/// The demo runs start four processes each (five with PostgreSQL); one at a time is enough for a
/// small machine.
static DEMO_RUNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SERVE_ARGS_ENV: &str = "SECKILL_E2E_SERVE_ARGS";

/// Launches an instance as a child process of this test binary.
fn test_launcher() -> Box<Launcher> {
    Box::new(move |args: &[String]| {
        let mut cmd = zklock::testing::process::rerun_test("seckill_instance_process").expect("test binary path");
        cmd.env(SERVE_ARGS_ENV, serde_json::to_string(args).expect("args as JSON"));
        cmd
    })
}

#[derive(clap::Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// Not a test: the body of an instance process started by the end-to-end tests (it serves
/// until its standard input closes). Run by hand it finds no arguments and fails.
#[test]
#[ignore = "a service instance process started by the end-to-end tests"]
fn seckill_instance_process() {
    // Run alone (`--include-ignored`), it fails instead of passing without doing anything.
    let Ok(raw) = std::env::var(SERVE_ARGS_ENV) else {
        panic!(
            "a service instance of the end-to-end tests, started without {SERVE_ARGS_ENV}: run those tests, not this"
        );
    };
    let args: Vec<String> = serde_json::from_str(&raw).expect("serve arguments");
    let cli = <ServeCli as clap::Parser>::parse_from(std::iter::once("serve".to_string()).chain(args));
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(service::serve(cli.args))
        .expect("serve");
}

/// The demo at test size, on `database` (`None`: a SQLite file the driver creates).
fn small_demo(unsafe_no_lock: bool, database: Option<String>) -> DemoArgs {
    DemoArgs {
        requests: 300,
        stock: 30,
        items: 3,
        cart_every: 4,
        instances: 3,
        concurrency: 32,
        unsafe_no_lock,
        zk: None,
        database,
        repeat_every: 20,
        race_window: Duration::from_millis(2),
        zk_timeout: Duration::from_secs(5),
        route: Route::Random,
        lock_args: LockArgs::default(),
    }
}

fn check_json_line(summary: &Summary) -> Value {
    let line: Value = serde_json::from_str(&summary.json_line()).expect("the JSON line parses");
    for key in [
        "requests",
        "sold",
        "remaining",
        "oversold",
        "duplicates",
        "cart_requests",
        "cart_orders",
        "partial_carts",
        "fenced_rejections",
        "p50_ms",
        "p99_ms",
        "throughput_rps",
        "mode",
    ] {
        assert!(line.get(key).is_some(), "JSON line lacks {key}: {line}");
    }
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_sale_across_three_processes_neither_oversells_nor_duplicates() {
    locked_sale(Backend::Sqlite, Route::Random, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_sale_across_three_processes_neither_oversells_nor_duplicates_on_postgres() {
    locked_sale(Backend::Postgres, Route::Random, Duration::ZERO).await;
}

/// Item locks cached in the instance that sold last, requests (and double clicks) sent to any
/// instance: every sale of an item in another instance takes the lock from a cached holder, and
/// carts take several cached locks at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_item_locks_neither_oversell_nor_duplicate() {
    locked_sale(Backend::Sqlite, Route::Random, Duration::from_secs(5)).await;
}

/// Item locks cached, requests routed by item: most sales are granted from the cache, carts
/// still reach items other instances keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_item_locks_routed_by_item_neither_oversell_nor_duplicate() {
    locked_sale(Backend::Sqlite, Route::ByItem, Duration::from_secs(5)).await;
}

async fn locked_sale(backend: Backend, route: Route, lock_cache: Duration) {
    let _one_at_a_time = DEMO_RUNS.lock().await;
    let db = TestDb::start(backend).await;
    let mut args = small_demo(false, db.demo_database());
    args.route = route;
    args.lock_args.lock_cache = lock_cache;
    let summary = driver::run_demo(&args, &*test_launcher()).await.expect("demo run");
    assert_ran_on(&summary, backend);
    eprintln!("{}", summary.report());
    let line = check_json_line(&summary);
    assert_eq!(line["mode"], "locked");
    assert_eq!(line["route"], route.name());
    assert_eq!(line["lock_cache_ms"], lock_cache.as_millis() as u64);
    assert_eq!(summary.requests, 300);
    assert_eq!(summary.oversold, 0, "oversold with the lock");
    assert!(
        summary.report().lines().any(|l| l == "oversold: 0"),
        "the readable summary lacks `oversold: 0`"
    );
    assert_eq!(summary.duplicates, 0, "a request id was charged twice with the lock");
    // Carts of 2–3 items in random order beside single buys of the same items: each cart was
    // sold whole or not at all, and every request got its answer (a deadlock between carts
    // naming items in opposite orders would show as lock timeouts).
    // Every 4th of 300 requests is a cart, except every 20th, which repeats the single buy
    // before it.
    assert_eq!(summary.cart_requests, 60);
    assert!(summary.cart_orders > 0, "no cart was sold: {}", summary.report());
    assert_eq!(
        summary.partial_carts,
        0,
        "a cart was sold in part: {}",
        summary.report()
    );
    let d = &summary.details;
    assert_eq!(
        (d.unavailable, d.errors),
        (0, 0),
        "requests went unanswered or failed: {}",
        summary.report()
    );
    // No lost update either: every unit taken from stock is in exactly one order.
    assert_eq!(
        summary.sold + summary.remaining,
        90,
        "stock accounting broken: sold {} + remaining {}",
        summary.sold,
        summary.remaining
    );
    // 300 requests for 3 × 30 units: the sale completes.
    assert_eq!(summary.remaining, 0, "units left unsold: {}", summary.report());
    assert_eq!(
        summary.fenced_rejections, 0,
        "no holder lost its lock, so nothing is fenced"
    );
    // Every instance served its lock metrics, and each that sold took item locks (routed by
    // item, the three items may all hash to two instances).
    assert_eq!(d.lock_waits.len(), 3);
    let took_locks = d.lock_waits.iter().filter(|(p50, _)| p50.is_some()).count();
    assert!(
        took_locks == 3 || (route == Route::ByItem && took_locks >= 1),
        "lock wait quantiles missing from /metrics: {:?}",
        d.lock_waits
    );
    assert!(d.lock_waits.iter().all(|(p50, p99)| p99 >= p50), "{:?}", d.lock_waits);
    assert!(summary.report().contains("lock wait (from /metrics): instance 0 p50"));
    // Every sale and cart took its item locks; without a cache none came from one. Routed by
    // item, most sales find their item's lock cached in their instance: all but the first of
    // each item, the ones right after a cart from another instance took it, and the ones
    // queued behind a holder (handed over, not cached).
    assert!(
        d.lock_grants >= 90,
        "{} item lock grants for 90 units sold",
        d.lock_grants
    );
    if lock_cache.is_zero() {
        assert_eq!(d.lock_grants_from_cache, 0);
    } else if route == Route::ByItem {
        assert!(
            d.lock_grants_from_cache > 0,
            "no grant came from a cache: {}",
            summary.report()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_sale_without_the_lock_oversells() {
    unlocked_sale(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_sale_without_the_lock_oversells_on_postgres() {
    unlocked_sale(Backend::Postgres).await;
}

async fn unlocked_sale(backend: Backend) {
    let _one_at_a_time = DEMO_RUNS.lock().await;
    let db = TestDb::start(backend).await;
    // The business pause between the stock check and the write is widened to 50 ms: the
    // first 32 concurrent requests (about ten per item) all read the full stock before any of
    // them writes, so the sale loses updates and sells more than it has. With the lock the
    // same sale, pause or not, never does (the locked tests above); this shows the oversell
    // check sees an oversell when there is one.
    let args = DemoArgs {
        race_window: Duration::from_millis(50),
        ..small_demo(true, db.demo_database())
    };
    let summary = driver::run_demo(&args, &*test_launcher()).await.expect("demo run");
    assert_ran_on(&summary, backend);
    eprintln!("{}", summary.report());
    let line = check_json_line(&summary);
    assert_eq!(line["mode"], "unsafe-no-lock");
    assert_eq!(summary.requests, 300);
    assert!(
        summary.oversold > 0,
        "no oversell without the lock: {}",
        summary.report()
    );
    assert_eq!(line["oversold"], summary.oversold, "the JSON line reports it");
    assert!(!summary.is_safe());
    // Every unit counted oversold is in an order beyond the stock: sold (units in orders)
    // exceeds what left the stock column by at least the oversell.
    assert!(
        summary.sold >= 90 - summary.remaining + summary.oversold,
        "oversold {} with {} sold and {} left of 90",
        summary.oversold,
        summary.sold,
        summary.remaining
    );
    // Every request is still answered: concurrent carts write their rows in one order, so
    // PostgreSQL, which locks rows, finds no deadlock between them.
    let d = &summary.details;
    assert_eq!(
        (d.unavailable, d.errors),
        (0, 0),
        "requests went unanswered or failed: {}",
        summary.report()
    );
}

/// An in-process instance on a free port; aborted when dropped.
struct LocalService {
    base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LocalService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn local_service(inventory: Inventory) -> LocalService {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = service::router(Arc::new(inventory));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    LocalService {
        base: format!("http://{addr}"),
        task,
    }
}

/// The database of one test: a SQLite file in a temporary directory, or a PostgreSQL server of
/// its own, so tests on either backend can run in parallel. Removed (the server shut down) on
/// drop.
enum TestDb {
    Sqlite(tempfile::TempDir),
    Postgres(PgServer),
}

impl TestDb {
    async fn start(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => TestDb::Sqlite(tempfile::tempdir().expect("temp dir")),
            Backend::Postgres => TestDb::Postgres(
                tokio::task::spawn_blocking(PgServer::start)
                    .await
                    .expect("PgServer::start panicked")
                    .expect("PostgreSQL"),
            ),
        }
    }

    fn url(&self) -> String {
        match self {
            TestDb::Sqlite(dir) => sqlite_url(&dir.path().join("seckill.db")),
            TestDb::Postgres(server) => server.url(),
        }
    }

    /// The `--database` of a demo run: with SQLite none, so the driver makes its own file as
    /// the demo does by default.
    fn demo_database(&self) -> Option<String> {
        match self {
            TestDb::Sqlite(_) => None,
            TestDb::Postgres(_) => Some(self.url()),
        }
    }

    async fn store(&self) -> Store {
        let store = Store::open(&self.url()).await.expect("open the store");
        assert_eq!(store.backend(), self.backend());
        store
    }

    fn backend(&self) -> Backend {
        match self {
            TestDb::Sqlite(_) => Backend::Sqlite,
            TestDb::Postgres(_) => Backend::Postgres,
        }
    }
}

/// Asserts that a demo ran on the database of `backend`.
fn assert_ran_on(summary: &Summary, backend: Backend) {
    let scheme = match backend {
        Backend::Sqlite => "sqlite://",
        Backend::Postgres => "postgres://",
    };
    assert!(
        summary.details.database.starts_with(scheme),
        "the demo ran on {}, not on {backend:?}",
        summary.details.database
    );
}

/// A connect string nothing listens on.
fn closed_port() -> String {
    zklock::testing::process::closed_address().to_string()
}

async fn send(http: &reqwest::Client, method: reqwest::Method, url: String, body: Option<&str>) -> (u16, Value) {
    let mut req = http.request(method, url);
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body.to_string());
    }
    let resp = req.send().await.expect("the service answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("body is not JSON: {text:?}"));
    (status, json)
}

fn assert_error(answer: &(u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "unexpected answer {answer:?}");
    assert_eq!(answer.1["error"], code, "unexpected error code in {answer:?}");
    assert!(
        answer.1["message"].as_str().is_some_and(|m| !m.is_empty()),
        "error without a message: {answer:?}"
    );
}

#[tokio::test]
async fn bad_input_gets_a_4xx_json_error() {
    bad_input(Backend::Sqlite).await;
}

#[tokio::test]
async fn bad_input_gets_a_4xx_json_error_on_postgres() {
    bad_input(Backend::Postgres).await;
}

async fn bad_input(backend: Backend) {
    let db = TestDb::start(backend).await;
    let store = db.store().await;
    // Validation happens before the lock, so no ZooKeeper is needed here.
    let locks = LockClient::builder(closed_port()).build().expect("client");
    let svc = local_service(Inventory::new(store.clone(), locks, true, Duration::ZERO)).await;
    let http = reqwest::Client::new();
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;
    let base = &svc.base;

    let created = send(
        &http,
        post.clone(),
        format!("{base}/items"),
        Some(r#"{"id": 7, "stock": 5}"#),
    )
    .await;
    assert_eq!(created.0, 201, "{created:?}");
    assert_eq!(created.1["stock"], 5);

    let cases: Vec<(&str, String, Option<&str>, u16, &str)> = vec![
        (
            "unknown item",
            format!("{base}/items/999/buy"),
            Some(r#"{"request_id":"a","qty":1}"#),
            404,
            "no_such_item",
        ),
        (
            "zero quantity",
            format!("{base}/items/7/buy"),
            Some(r#"{"request_id":"b","qty":0}"#),
            400,
            "bad_request",
        ),
        (
            "negative quantity",
            format!("{base}/items/7/buy"),
            Some(r#"{"request_id":"c","qty":-3}"#),
            400,
            "bad_request",
        ),
        (
            "huge quantity",
            format!("{base}/items/7/buy"),
            Some(r#"{"request_id":"d","qty":1e30}"#),
            400,
            "bad_request",
        ),
        (
            "malformed JSON",
            format!("{base}/items/7/buy"),
            Some(r#"{"request_id": "e", "qty": "#),
            400,
            "bad_request",
        ),
        (
            "missing field",
            format!("{base}/items/7/buy"),
            Some(r#"{"qty": 1}"#),
            400,
            "bad_request",
        ),
        (
            "empty request id",
            format!("{base}/items/7/buy"),
            Some(r#"{"request_id":"","qty":1}"#),
            400,
            "bad_request",
        ),
        (
            "non-numeric id",
            format!("{base}/items/abc/buy"),
            Some(r#"{"request_id":"f","qty":1}"#),
            400,
            "bad_request",
        ),
        ("empty body", format!("{base}/items/7/buy"), None, 400, "bad_request"),
        (
            "negative stock",
            format!("{base}/items"),
            Some(r#"{"id": 8, "stock": -1}"#),
            400,
            "bad_request",
        ),
        (
            "existing item",
            format!("{base}/items"),
            Some(r#"{"id": 7, "stock": 1}"#),
            409,
            "item_exists",
        ),
    ];
    for (what, url, body, status, code) in cases {
        let answer = send(&http, post.clone(), url, body).await;
        assert_eq!(answer.0, status, "{what}: {answer:?}");
        assert_error(&answer, status, code);
    }
    assert_error(
        &send(&http, get.clone(), format!("{base}/items/999"), None).await,
        404,
        "no_such_item",
    );
    assert_error(
        &send(&http, get.clone(), format!("{base}/items/999/orders"), None).await,
        404,
        "no_such_item",
    );
    assert_error(
        &send(&http, get.clone(), format!("{base}/nowhere"), None).await,
        400,
        "bad_request",
    );

    // None of it changed the item.
    let item = store.item(7).await.expect("read").expect("item 7");
    assert_eq!(item.stock, 5);
    assert!(store.orders(7).await.expect("orders").is_empty());
}

#[tokio::test]
async fn unreachable_zookeeper_gives_503_within_the_timeout_and_writes_nothing() {
    unreachable_zookeeper(Backend::Sqlite).await;
}

#[tokio::test]
async fn unreachable_zookeeper_gives_503_within_the_timeout_and_writes_nothing_on_postgres() {
    unreachable_zookeeper(Backend::Postgres).await;
}

async fn unreachable_zookeeper(backend: Backend) {
    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 10).await.expect("create");
    let zk_timeout = Duration::from_secs(2);
    let locks = LockClient::builder(closed_port())
        .session_timeout(zk_timeout)
        .connect_timeout(zk_timeout)
        .build()
        .expect("client");
    let svc = local_service(Inventory::new(store.clone(), locks, true, Duration::ZERO)).await;
    let http = reqwest::Client::new();

    let t0 = Instant::now();
    let answer = send(
        &http,
        reqwest::Method::POST,
        format!("{}/items/1/buy", svc.base),
        Some(r#"{"request_id":"r1","qty":1}"#),
    )
    .await;
    let waited = t0.elapsed();
    assert_error(&answer, 503, "lock_unavailable");
    // The buy's lock timeout is 10 s; the answer comes within it (plus scheduling slack).
    assert!(waited < Duration::from_secs(15), "answered after {waited:?}");

    let item = store.item(1).await.expect("read").expect("item");
    assert_eq!(item.stock, 10, "stock changed without the lock");
    assert!(
        store.orders(1).await.expect("orders").is_empty(),
        "an order was written"
    );
}

#[tokio::test]
async fn lock_timeout_and_partition_give_503_and_write_nothing() {
    lock_timeout_and_partition(Backend::Sqlite).await;
}

#[tokio::test]
async fn lock_timeout_and_partition_give_503_and_write_nothing_on_postgres() {
    lock_timeout_and_partition(Backend::Postgres).await;
}

async fn lock_timeout_and_partition(backend: Backend) {
    let server = ZkServer::start().expect("ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 10).await.expect("create");
    let locks = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .build()
        .expect("client");
    let svc = local_service(Inventory::new(store.clone(), locks, true, Duration::ZERO)).await;
    let http = reqwest::Client::new();
    let buy = |id: &'static str| {
        let http = http.clone();
        let url = format!("{}/items/1/buy", svc.base);
        async move {
            let t0 = Instant::now();
            let body = format!(r#"{{"request_id":"{id}","qty":1}}"#);
            let answer = send(&http, reqwest::Method::POST, url, Some(&body)).await;
            (answer, t0.elapsed())
        }
    };

    // A working buy first: the service is healthy.
    let (ok, _) = buy("first").await;
    assert_eq!(ok.0, 201, "{ok:?}");

    // Someone else holds the item's lock: the buy waits its 10 s timeout, then 503.
    let other = LockClient::connect(&server.connect_string())
        .await
        .expect("other client");
    let held = other.mutex("seckill:1").expect("lock").acquire().await.expect("hold");
    let (answer, waited) = buy("while-held").await;
    assert_error(&answer, 503, "lock_timeout");
    assert!(waited >= Duration::from_secs(9), "gave up early, after {waited:?}");
    assert!(waited < Duration::from_secs(20), "answered after {waited:?}");
    held.release().await.expect("release");

    // A partition between the service and ZooKeeper: 503 within the lock timeout, no hang.
    proxy.blackhole();
    let (answer, waited) = buy("partitioned").await;
    assert_eq!(answer.0, 503, "{answer:?}");
    assert!(
        answer.1["error"] == "lock_unavailable" || answer.1["error"] == "lock_timeout",
        "{answer:?}"
    );
    assert!(waited < Duration::from_secs(20), "answered after {waited:?}");

    // Only the first buy wrote anything.
    let orders = store.orders(1).await.expect("orders");
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(orders[0].request_id, "first");
    assert_eq!(store.item(1).await.expect("read").expect("item").stock, 9);
}

#[tokio::test]
async fn the_database_refuses_a_write_with_a_stale_fencing_token() {
    stale_token_write(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_database_refuses_a_write_with_a_stale_fencing_token_on_postgres() {
    stale_token_write(Backend::Postgres).await;
}

/// The fencing tokens of two successive holds of `seckill:1` on a real server: the first (stale
/// once the second is granted) and the second (fresh).
async fn successive_tokens() -> (zklock::FencingToken, zklock::FencingToken) {
    let server = ZkServer::start().expect("ZooKeeper");
    let client = LockClient::connect(&server.connect_string()).await.expect("client");
    let lock = client.mutex("seckill:1").expect("lock");
    let first = lock.acquire().await.expect("first hold");
    let stale = first.fencing_token();
    first.release().await.expect("release");
    let second = lock.acquire().await.expect("second hold");
    let fresh = second.fencing_token();
    second.release().await.expect("release");
    client.close().await;
    assert!(stale < fresh);
    (stale, fresh)
}

async fn stale_token_write(backend: Backend) {
    let (stale, fresh) = successive_tokens().await;

    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 10).await.expect("create");

    // The newer holder writes; writing twice within one hold (equal tokens) is allowed.
    store
        .commit_purchase(1, 9, 1, "new-1", Some(fresh))
        .await
        .expect("fresh write");
    store
        .commit_purchase(1, 8, 1, "new-2", Some(fresh))
        .await
        .expect("same hold again");

    // The paused former holder wakes up and writes with its old token: refused, and neither
    // the stock nor the orders change.
    match store.commit_purchase(1, 9, 1, "stale", Some(stale)).await {
        Err(StoreError::Fenced { offered, accepted, .. }) => {
            assert_eq!(offered, stale.to_string());
            assert_eq!(accepted, fresh.to_string());
        }
        other => panic!("stale write not fenced: {other:?}"),
    }
    let item = store.item(1).await.expect("read").expect("item");
    assert_eq!(item.stock, 8);
    assert_eq!(item.last_token, Some(fresh.to_string()));
    let orders = store.orders(1).await.expect("orders");
    assert_eq!(
        orders.iter().map(|o| o.request_id.as_str()).collect::<Vec<_>>(),
        ["new-1", "new-2"]
    );
}

#[tokio::test]
async fn a_stale_holder_cannot_write_between_a_newer_holders_read_and_write() {
    stale_write_between(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_stale_holder_cannot_write_between_a_newer_holders_read_and_write_on_postgres() {
    stale_write_between(Backend::Postgres).await;
}

/// The oversell a fenced write alone lets through: the last unit, a paused former holder that
/// read it, a newer holder that reads it too, then the paused one writes first. The newer
/// holder's read claims the item with its token, so the paused one's write is refused and the
/// unit is sold once.
async fn stale_write_between(backend: Backend) {
    let (stale, fresh) = successive_tokens().await;

    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 1).await.expect("create");

    let seen_by_stale = store.claim(1, Some(stale)).await.expect("stale read").expect("item");
    let seen_by_fresh = store.claim(1, Some(fresh)).await.expect("fresh read").expect("item");
    assert_eq!((seen_by_stale.stock, seen_by_fresh.stock), (1, 1));
    match store.commit_purchase(1, 0, 1, "stale", Some(stale)).await {
        Err(StoreError::Fenced { offered, accepted, .. }) => {
            assert_eq!((offered, accepted), (stale.to_string(), fresh.to_string()));
        }
        other => panic!("the paused holder's write got in: {other:?}"),
    }
    store
        .commit_purchase(1, 0, 1, "fresh", Some(fresh))
        .await
        .expect("the newer holder's write");
    let orders = store.orders(1).await.expect("orders");
    assert_eq!(orders.len(), 1, "the last unit was sold twice: {orders:?}");
    // A read with an older token than the item's is refused at once.
    assert!(matches!(
        store.claim(1, Some(stale)).await,
        Err(StoreError::Fenced { .. })
    ));
}

#[tokio::test]
async fn a_sale_finds_its_earlier_order_or_claims_the_item() {
    placed_or_claim(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_sale_finds_its_earlier_order_or_claims_the_item_on_postgres() {
    placed_or_claim(Backend::Postgres).await;
}

/// The sale's first step (`Checkout::placed_or_claim`, one statement on PostgreSQL): a
/// repeated request gets its order back and claims nothing; a new one claims the item with its
/// token; an older token is refused; a missing item is `None`.
async fn placed_or_claim(backend: Backend) {
    let (stale, fresh) = successive_tokens().await;

    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 10).await.expect("create");
    let placed = store
        .commit_purchase(1, 9, 1, "r-1", Some(stale))
        .await
        .expect("a first sale");

    let mut conn = store.checkout().await.expect("a connection");
    match conn.placed_or_claim(1, "r-1", Some(fresh)).await.expect("repeat") {
        Placed::Already(order) => assert_eq!(order, placed),
        other => panic!("a repeated request was not answered with its order: {other:?}"),
    }
    let item = store.item(1).await.expect("read").expect("item");
    assert_eq!(item.last_token, Some(stale.to_string()), "a repeat claimed the item");

    match conn.placed_or_claim(1, "r-2", Some(fresh)).await.expect("new request") {
        Placed::Claimed(Some(item)) => {
            assert_eq!(item.stock, 9);
            assert_eq!(item.last_token, Some(fresh.to_string()));
        }
        other => panic!("a new request did not claim the item: {other:?}"),
    }
    match conn.placed_or_claim(1, "r-3", Some(stale)).await {
        Err(StoreError::Fenced { offered, accepted, .. }) => {
            assert_eq!((offered, accepted), (stale.to_string(), fresh.to_string()));
        }
        other => panic!("a claim with an older token got in: {other:?}"),
    }
    assert!(matches!(
        conn.placed_or_claim(2, "r-4", Some(fresh)).await,
        Ok(Placed::Claimed(None))
    ));
}

#[tokio::test]
async fn a_fenced_refusal_is_a_409_json_answer() {
    fenced_refusal(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_fenced_refusal_is_a_409_json_answer_on_postgres() {
    fenced_refusal(Backend::Postgres).await;
}

async fn fenced_refusal(backend: Backend) {
    // The service path of a fenced write: the item has accepted a token far in the future,
    // so the real lock's token is stale and the write is refused.
    let server = ZkServer::start().expect("ZooKeeper");
    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 10).await.expect("create");
    let future_token: zklock::FencingToken = "7fffffff00000000-00000000".parse().expect("token");
    store
        .commit_purchase(1, 10, 0, "from-the-future", Some(future_token))
        .await
        .expect("seed a newer token");
    let locks = LockClient::connect(&server.connect_string()).await.expect("client");
    let svc = local_service(Inventory::new(store.clone(), locks, true, Duration::ZERO)).await;
    let answer = send(
        &reqwest::Client::new(),
        reqwest::Method::POST,
        format!("{}/items/1/buy", svc.base),
        Some(&json!({"request_id": "late", "qty": 1}).to_string()),
    )
    .await;
    assert_error(&answer, 409, "fenced");
    assert_eq!(store.item(1).await.expect("read").expect("item").stock, 10);
    assert!(store.order_for_request(1, "late").await.expect("read").is_none());
}

#[tokio::test]
async fn a_cart_is_sold_whole_or_refused_whole() {
    cart_whole_or_nothing(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_cart_is_sold_whole_or_refused_whole_on_postgres() {
    cart_whole_or_nothing(Backend::Postgres).await;
}

async fn cart_whole_or_nothing(backend: Backend) {
    let server = ZkServer::start().expect("ZooKeeper");
    let db = TestDb::start(backend).await;
    let store = db.store().await;
    store.create_item(1, 5).await.expect("create");
    store.create_item(2, 1).await.expect("create");
    store.create_item(3, 5).await.expect("create");
    // Item 3 has accepted a token from far in the future: any real lock's write to it is
    // refused by the fence.
    let future_token: zklock::FencingToken = "7fffffff00000000-00000000".parse().expect("token");
    store
        .commit_purchase(3, 5, 0, "from-the-future", Some(future_token))
        .await
        .expect("seed a newer token");
    let locks = LockClient::connect(&server.connect_string()).await.expect("client");
    let svc = local_service(Inventory::new(store.clone(), locks, true, Duration::ZERO)).await;
    let http = reqwest::Client::new();
    let checkout = |body: Value| {
        let (http, url) = (http.clone(), format!("{}/orders", svc.base));
        async move { send(&http, reqwest::Method::POST, url, Some(&body.to_string())).await }
    };
    let stock = |id| {
        let store = store.clone();
        async move { store.item(id).await.expect("read").expect("item").stock }
    };

    // Lines in any order; one order per line, each fenced by its item's own token.
    let cart = json!({"request_id": "cart-1", "lines": [{"item_id": 2, "qty": 1}, {"item_id": 1, "qty": 2}]});
    let placed = checkout(cart.clone()).await;
    assert_eq!(placed.0, 201, "{placed:?}");
    let orders = placed.1["orders"].as_array().expect("orders").clone();
    assert_eq!(orders.len(), 2, "{placed:?}");
    assert!(orders
        .iter()
        .all(|o| o["request_id"] == "cart-1" && o["token"].is_string()));
    assert_ne!(orders[0]["token"], orders[1]["token"], "each item has its own lock");
    assert_eq!((stock(1).await, stock(2).await), (3, 0));

    // A retry gets the same cart back and writes nothing.
    let again = checkout(cart).await;
    assert_eq!(again.0, 200, "{again:?}");
    assert_eq!(again.1["orders"], placed.1["orders"]);
    assert_eq!((stock(1).await, stock(2).await), (3, 0));

    // One line cannot be filled: the whole cart is refused, the other line is not sold.
    let short =
        checkout(json!({"request_id": "cart-2", "lines": [{"item_id": 1, "qty": 1}, {"item_id": 2, "qty": 1}]})).await;
    assert_error(&short, 409, "sold_out");
    assert!(short.1["message"].as_str().unwrap().contains("item 2"), "{short:?}");
    assert_eq!(stock(1).await, 3);
    assert!(store.order_for_request(1, "cart-2").await.expect("read").is_none());

    // One line's write is fenced: the transaction rolls back the line already written.
    let fenced =
        checkout(json!({"request_id": "cart-3", "lines": [{"item_id": 1, "qty": 1}, {"item_id": 3, "qty": 1}]})).await;
    assert_error(&fenced, 409, "fenced");
    assert_eq!((stock(1).await, stock(3).await), (3, 5));
    assert!(store.order_for_request(1, "cart-3").await.expect("read").is_none());

    // Bad carts are 4xx, before any lock is taken.
    let too_many: Vec<Value> = (0..17).map(|id| json!({"item_id": id, "qty": 1})).collect();
    for (why, body, status, code) in [
        ("no lines", json!({"request_id": "x", "lines": []}), 400, "bad_request"),
        (
            "too many lines",
            json!({"request_id": "x", "lines": too_many}),
            400,
            "bad_request",
        ),
        (
            "an item twice",
            json!({"request_id": "x", "lines": [{"item_id": 1, "qty": 1}, {"item_id": 1, "qty": 1}]}),
            400,
            "bad_request",
        ),
        (
            "zero quantity",
            json!({"request_id": "x", "lines": [{"item_id": 1, "qty": 0}]}),
            400,
            "bad_request",
        ),
        (
            "no request id",
            json!({"request_id": "", "lines": [{"item_id": 1, "qty": 1}]}),
            400,
            "bad_request",
        ),
        ("missing lines", json!({"request_id": "x"}), 400, "bad_request"),
        (
            "unknown item",
            json!({"request_id": "x", "lines": [{"item_id": 99, "qty": 1}]}),
            404,
            "no_such_item",
        ),
    ] {
        let answer = checkout(body).await;
        assert_eq!(answer.0, status, "{why}: {answer:?}");
        assert_eq!(answer.1["error"], code, "{why}: {answer:?}");
    }
    assert_eq!(stock(1).await, 3);
}

/// A smoke test of the benchmark's seckill section (issue #32), tiny: one round of the same sale
/// under zklock (uncached and cached, routed at random and by item), the database's advisory
/// lock, a Redis lock and the conditional update, on real ZooKeeper, PostgreSQL and Redis
/// servers of its own, then the fault round for cached zklock and Redis (an instance killed, one
/// frozen past the Redis TTL and the session timeout, the lock server frozen as long). Checks the
/// section's JSON has every figure, that every zklock configuration, the database lock and the
/// conditional update sold no unit twice in the plain round, and that every fault fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_seckill_section_smoke() {
    use zklock_examples::seckill::bench::{seckill_section, Sale, SeckillPlan};
    let _one_at_a_time = DEMO_RUNS.lock().await;
    let plan = SeckillPlan {
        rounds: 1,
        items: 4,
        stock: 20,
        concurrency: 16,
        instances: 3,
        fault_sales: vec![
            Sale {
                cached: true,
                ..Sale::plain(LockKind::Zklock)
            },
            Sale::plain(LockKind::Redis),
        ],
        cache_linger: Duration::from_secs(5),
        fault_pause: Duration::from_millis(1500),
        redis_ttl: Duration::from_millis(500),
        zk_timeout: Duration::from_millis(1000),
        race_window: Duration::from_millis(2),
    };
    let section = seckill_section(&plan, &*test_launcher(), &mut |what: &str| eprintln!("{what}"))
        .await
        .expect("the seckill section runs");
    eprintln!("{section:#}");
    const ZKLOCK: [&str; 4] = ["zklock", "zklock_cached", "zklock_by_item", "zklock_cached_by_item"];
    for lock in ZKLOCK.into_iter().chain(["database", "redis", "none"]) {
        let entry = &section[lock];
        for key in [
            "throughput_rps",
            "p50_ms",
            "p99_ms",
            "oversold",
            "duplicates",
            "lost_updates",
        ] {
            assert!(entry[key].is_number(), "seckill.{lock}.{key} missing: {entry}");
        }
        assert_eq!(entry["rounds"].as_array().map(Vec::len), Some(1), "{lock}");
        assert!(
            entry["rounds"][0]["sold"].as_i64() > Some(0),
            "{lock} sold nothing: {entry}"
        );
    }
    for lock in ZKLOCK.into_iter().chain(["database", "none"]) {
        assert_eq!(section[lock]["oversold"], 0, "{lock} oversold: {}", section[lock]);
    }
    // Only the locks whose buyers check the request id under the lock are idempotent.
    for lock in ZKLOCK.into_iter().chain(["database"]) {
        assert_eq!(
            section[lock]["duplicates"], 0,
            "{lock} sold a request twice: {}",
            section[lock]
        );
    }
    for key in [
        "throughput_zklock_vs_none",
        "throughput_zklock_vs_database",
        "throughput_zklock_cached_by_item_vs_none",
        "throughput_zklock_cached_by_item_vs_database",
        "throughput_zklock_cached_vs_zklock",
    ] {
        assert!(section["ratios"][key].is_number(), "seckill.ratios.{key} missing");
    }
    // The fault round's counts are reported, not asserted: whether a frozen holder's stale
    // write lands before or after its successor's read is a race, for every lock the round runs.
    let faults = &section["fault_round"];
    for lock in ["zklock_cached", "redis"] {
        let fired = faults[lock]["faults"].as_array().expect("the faults fired");
        assert_eq!(fired.len(), 3, "{lock}: {fired:?}");
        assert!(
            fired.iter().all(|f| !f.as_str().unwrap_or("").contains("not fired")),
            "{fired:?}"
        );
        assert!(faults[lock]["oversold"].is_number(), "{lock}");
    }
}
