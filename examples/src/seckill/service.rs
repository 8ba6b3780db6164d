//! The seckill HTTP service: routes, the locked buy path, and JSON errors.
//!
//! | method and path            | body                             | answers |
//! |----------------------------|----------------------------------|---------|
//! | `GET /health`              |                                  | 200 |
//! | `POST /items`              | `{"id": 1, "stock": 100}`        | 201 item · 409 `item_exists` |
//! | `GET /items/{id}`          |                                  | 200 item · 404 `no_such_item` |
//! | `POST /items/{id}/buy`     | `{"request_id": "r-1", "qty": 1}` | 201 order · 200 the order an earlier request with this id placed · 409 `sold_out` / `fenced` · 503 `lock_timeout` / `lock_unavailable` |
//! | `GET /items/{id}/orders`   |                                  | 200 orders · 404 |
//! | `GET /metrics`             |                                  | 200 Prometheus text (zklock's lock metrics among them) |
//! | `POST /orders`             | `{"request_id": "c-1", "lines": [{"item_id": 1, "qty": 2}, …]}` | 201 cart · 200 the cart an earlier request with this id placed · 404 · 409 `sold_out` / `fenced` · 503 |
//!
//! Every error is a JSON object `{"error": "<code>", "message": "<text>"}`; bad input
//! (malformed JSON, a missing field, a quantity below 1, a non-numeric id, an empty cart or one
//! naming an item twice) is a 4xx.
//!
//! A cart is sold whole or not at all: it holds the locks of all its items at once (one
//! multi-lock, so two carts naming the same items in opposite orders cannot deadlock), checks
//! every line, and writes every line in one transaction, each write fenced by its item's token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use zklock::{distributed_lock, FencingToken, LockClient, LockError, MultiGuard, MultiLock};

use super::redis_lock::{RedisLock, RedisLockError};
use super::store::{Backend, Item, Order, Placed, Sale, Store, StoreError, Write};

/// The largest quantity one request may buy (keeps arithmetic far from overflow).
pub const MAX_QTY: i64 = 1_000_000;

/// The most lines one cart may have.
pub const MAX_CART_LINES: usize = 16;

/// How long a purchase waits for its locks.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How a `serve` process is configured (the `serve` subcommand's options).
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port. The bound address is printed on stdout
    /// as `SECKILL_LISTENING <addr>`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// ZooKeeper connect string (`host:port[,host:port…]`).
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub zk: String,
    /// Database URL: `sqlite://<file>?mode=rwc` or `postgres://…`.
    #[arg(long, env = "DATABASE_URL")]
    pub database: String,
    /// ZooKeeper session timeout; also bounds how long opening a session may take, so an
    /// unreachable ensemble is reported (503) within this time.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub zk_timeout: Duration,
    /// Pause between reading the stock and writing it back, widening the race window that the
    /// lock closes (the same pause is taken with and without the lock).
    #[arg(long, default_value = "2ms", value_parser = humantime::parse_duration)]
    pub race_window: Duration,
    /// Run the buy path without the distributed lock (to show the oversell it prevents).
    #[arg(long)]
    pub unsafe_no_lock: bool,
    /// The lock the buy path runs under.
    #[command(flatten)]
    pub lock_args: LockArgs,
    /// Exit when standard input closes (set by the demo driver, so instances never outlive it).
    #[arg(long)]
    pub exit_with_stdin: bool,
}

/// What keeps two buyers of one item apart, for comparing locks on one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// `#[distributed_lock("seckill:{item_id}")]`: a ZooKeeper lock, the write fenced by its
    /// token.
    Zklock,
    /// PostgreSQL's `pg_advisory_xact_lock(item_id)` in the purchase's own transaction.
    Database,
    /// A Redis key set with `SET NX PX`, released by compare-and-delete (`--redis`).
    Redis,
    /// No lock: a conditional update `SET stock = stock - qty WHERE stock >= qty` takes the
    /// units.
    None,
}

impl LockKind {
    /// Every kind, in the order the benchmark reports them.
    pub const ALL: [LockKind; 4] = [LockKind::Zklock, LockKind::Database, LockKind::Redis, LockKind::None];

    /// The name the command line and the benchmark's JSON use.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Zklock => "zklock",
            LockKind::Database => "database",
            LockKind::Redis => "redis",
            LockKind::None => "none",
        }
    }
}

/// The lock the buy path runs under, and the Redis lock's settings (options of `serve` and of
/// `demo`).
#[derive(Debug, Clone, clap::Args)]
pub struct LockArgs {
    /// What keeps two buyers of one item apart: zklock, database (PostgreSQL's advisory lock;
    /// the demo starts a PostgreSQL server unless DATABASE_URL is set), redis (the demo starts a
    /// Redis server unless --redis is given) or none (a conditional update). Carts are sold
    /// under zklock only (the demo: give --cart-every 0 with the others).
    #[arg(long, value_enum, default_value_t = LockKind::Zklock)]
    pub lock: LockKind,
    /// The Redis server of `--lock redis` (`redis://host:port/`).
    #[arg(long)]
    pub redis: Option<String>,
    /// How long a Redis lock key lives before it expires on its own.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub redis_ttl: Duration,
    /// zklock only: keep an item's lock cached in the instance that sold it last, for this
    /// long after the sale, until another instance asks for it (`LockClientBuilder::default_cache`;
    /// 0s, the default: released after every sale).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub lock_cache: Duration,
}

impl Default for LockArgs {
    /// zklock, not cached; no Redis server; a 10 s Redis TTL (the command line's defaults).
    fn default() -> Self {
        LockArgs {
            lock: LockKind::Zklock,
            redis: None,
            redis_ttl: Duration::from_secs(10),
            lock_cache: Duration::ZERO,
        }
    }
}

/// How one instance runs the buy path.
#[derive(Debug, Clone)]
enum Mode {
    /// Under the ZooKeeper lock (single buys and carts).
    Zklock,
    /// Read, check, write with no lock at all: the unsafe demonstration.
    Unlocked,
    /// Under the database's advisory lock.
    Database,
    /// Under a Redis lock.
    Redis(RedisLock),
    /// A conditional update, no lock.
    Conditional,
}

/// A buy request's body.
#[derive(Debug, Clone, Deserialize)]
pub struct BuyRequest {
    /// Client-chosen id; a retry with the same id gets the first order back instead of a
    /// second one.
    pub request_id: String,
    /// Units to buy, at least 1.
    pub qty: i64,
}

/// A cart checkout's body.
#[derive(Debug, Clone, Deserialize)]
pub struct CartRequest {
    /// Client-chosen id, shared by the cart's orders; a retry gets the cart back.
    pub request_id: String,
    /// What to buy: distinct items, in any order.
    pub lines: Vec<CartLine>,
}

/// One line of a cart.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct CartLine {
    /// The item.
    pub item_id: i64,
    /// Units, at least 1.
    pub qty: i64,
}

#[derive(Debug, Clone, Deserialize)]
struct NewItem {
    id: i64,
    stock: i64,
}

/// What a successful buy returns.
#[derive(Debug, Clone)]
pub enum Purchase {
    /// A new order was written.
    Placed(Order),
    /// This request id had already placed this order; nothing new was written.
    AlreadyPlaced(Order),
}

/// What a successful checkout returns: one order per line.
#[derive(Debug, Clone)]
pub enum CartPurchase {
    /// The cart's orders were written.
    Placed(Vec<Order>),
    /// This request id had already placed these orders; nothing new was written.
    AlreadyPlaced(Vec<Order>),
}

/// Why a request failed; each variant maps to one HTTP status and error code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the body or path could not be read.
    #[error("{0}")]
    BadRequest(String),
    /// 404.
    #[error("no item {0}")]
    NoSuchItem(i64),
    /// 409.
    #[error("item {0} already exists")]
    ItemExists(i64),
    /// 409: fewer units left than asked for.
    #[error("item {item_id} has {stock} units left, {qty} asked for")]
    SoldOut {
        /// The item.
        item_id: i64,
        /// Units left when the request was checked.
        stock: i64,
        /// Units asked for.
        qty: i64,
    },
    /// 409: the database refused the write because a newer lock holder already wrote.
    #[error("write refused by the fence: {0}")]
    Fenced(String),
    /// 503: the lock was not granted within the timeout.
    #[error("the lock was not granted in time: {0}")]
    LockTimeout(LockError),
    /// 503: ZooKeeper is unreachable, or the lock was lost while the purchase ran.
    #[error("the lock service is unavailable: {0}")]
    LockUnavailable(LockError),
    /// 503: the database failed; nothing was written.
    #[error("database unavailable: {0}")]
    Database(String),
    /// 503: the Redis lock was not granted in time (`lock_timeout`) or Redis failed
    /// (`lock_unavailable`).
    #[error("{0}")]
    RedisLock(RedisLockError),
}

impl From<RedisLockError> for ApiError {
    fn from(err: RedisLockError) -> Self {
        ApiError::RedisLock(err)
    }
}

impl From<LockError> for ApiError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::Timeout { .. } => ApiError::LockTimeout(err),
            other => ApiError::LockUnavailable(other),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NoSuchItem(id) => ApiError::NoSuchItem(id),
            StoreError::ItemExists(id) => ApiError::ItemExists(id),
            err @ StoreError::Fenced { .. } => ApiError::Fenced(err.to_string()),
            StoreError::Database(err) => ApiError::Database(err.to_string()),
        }
    }
}

impl ApiError {
    /// The HTTP status and the machine-readable error code.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::NoSuchItem(_) => (StatusCode::NOT_FOUND, "no_such_item"),
            ApiError::ItemExists(_) => (StatusCode::CONFLICT, "item_exists"),
            ApiError::SoldOut { .. } => (StatusCode::CONFLICT, "sold_out"),
            ApiError::Fenced(_) => (StatusCode::CONFLICT, "fenced"),
            ApiError::LockTimeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_timeout"),
            ApiError::LockUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_unavailable"),
            ApiError::Database(_) => (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
            ApiError::RedisLock(RedisLockError::Timeout { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "lock_timeout"),
            ApiError::RedisLock(RedisLockError::Redis(_)) => (StatusCode::SERVICE_UNAVAILABLE, "lock_unavailable"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        (status, Json(json!({ "error": code, "message": self.to_string() }))).into_response()
    }
}

/// The inventory logic shared by all handlers of one process.
#[derive(Debug, Clone)]
pub struct Inventory {
    store: Store,
    /// The lock client. Built without connecting: the first buy opens the session, so the
    /// service starts (and answers 503) even while ZooKeeper is down.
    locks: LockClient,
    mode: Mode,
    race_window: Duration,
    /// Renders the process's metrics (the zklock ones among them) for `GET /metrics`.
    metrics: Option<PrometheusHandle>,
}

impl Inventory {
    /// Wraps a store and a lock client. With `use_lock == false` the buy path runs unlocked.
    pub fn new(store: Store, locks: LockClient, use_lock: bool, race_window: Duration) -> Self {
        Inventory {
            store,
            locks,
            mode: if use_lock { Mode::Zklock } else { Mode::Unlocked },
            race_window,
            metrics: None,
        }
    }

    /// Runs the buy path under the database's advisory lock instead of zklock's.
    pub fn with_database_lock(mut self) -> Self {
        self.mode = Mode::Database;
        self
    }

    /// Runs the buy path under `lock`, a Redis lock, instead of zklock's.
    pub fn with_redis_lock(mut self, lock: RedisLock) -> Self {
        self.mode = Mode::Redis(lock);
        self
    }

    /// Runs the buy path without a lock, with a conditional update taking the units.
    pub fn with_conditional_update(mut self) -> Self {
        self.mode = Mode::Conditional;
        self
    }

    /// Serves `GET /metrics` from `handle` (Prometheus text).
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// Under a Redis lock, how many releases so far found their key expired or taken by another
    /// holder (the lock was not exclusive to the end); `None` under any other lock.
    pub fn redis_expired_releases(&self) -> Option<u64> {
        match &self.mode {
            Mode::Redis(lock) => Some(lock.expired_while_held()),
            _ => None,
        }
    }

    /// Buys `req.qty` units of `item_id`.
    pub async fn buy(&self, item_id: i64, req: &BuyRequest) -> Result<Purchase, ApiError> {
        check_qty(req.qty)?;
        check_request_id(&req.request_id)?;
        // Fast refusal without the lock once the item is sold out: stock never grows, so a
        // stock below qty read now stays below it. (A retry of a request that did buy still
        // gets its order back.)
        let item = self.store.item(item_id).await?.ok_or(ApiError::NoSuchItem(item_id))?;
        if item.stock < req.qty {
            if let Some(order) = self.store.order_for_request(item_id, &req.request_id).await? {
                return Ok(Purchase::AlreadyPlaced(order));
            }
            return Err(ApiError::SoldOut {
                item_id,
                stock: item.stock,
                qty: req.qty,
            });
        }
        match &self.mode {
            Mode::Zklock => self.buy_locked(item_id, req).await,
            Mode::Unlocked => self.read_check_write(item_id, req, None).await,
            Mode::Redis(lock) => {
                let guard = lock.acquire(&item_lock(item_id), LOCK_TIMEOUT).await?;
                let bought = self.read_check_write(item_id, req, None).await;
                // The sale is decided: a release that fails or finds the key expired (counted,
                // see `redis_expired_releases`) changes nothing for this request; the key
                // expires on its own.
                if let Err(err) = lock.release(guard).await {
                    tracing::warn!("releasing the Redis lock of item {item_id} failed: {err}");
                }
                bought
            }
            Mode::Database => {
                let sale = self
                    .store
                    .buy_under_advisory_lock(item_id, req.qty, &req.request_id, self.race_window)
                    .await?;
                purchase(item_id, req.qty, sale)
            }
            Mode::Conditional => {
                // The same steps and pause as the locked paths, on one connection, then the
                // conditional update.
                let mut db = self.store.checkout().await?;
                if let Some(order) = db.order_for_request(item_id, &req.request_id).await? {
                    return Ok(Purchase::AlreadyPlaced(order));
                }
                self.pause_in_race_window().await;
                let sale = db.buy_conditional(item_id, req.qty, &req.request_id).await?;
                purchase(item_id, req.qty, sale)
            }
        }
    }

    /// Buys every line of a cart, or nothing.
    pub async fn checkout(&self, req: &CartRequest) -> Result<CartPurchase, ApiError> {
        check_request_id(&req.request_id)?;
        if req.lines.is_empty() || req.lines.len() > MAX_CART_LINES {
            return Err(ApiError::BadRequest(format!(
                "a cart has 1 to {MAX_CART_LINES} lines, got {}",
                req.lines.len()
            )));
        }
        for (i, line) in req.lines.iter().enumerate() {
            check_qty(line.qty)?;
            if req.lines[..i].iter().any(|l| l.item_id == line.item_id) {
                return Err(ApiError::BadRequest(format!(
                    "item {} appears twice in the cart; give it one line",
                    line.item_id
                )));
            }
        }
        // Fast refusal without the locks, as for a single buy: stock never grows.
        if let Err(refused) = self.cart_items(req, None).await {
            return match (refused, self.placed_cart(req).await?) {
                (ApiError::SoldOut { .. }, placed) if !placed.is_empty() => Ok(CartPurchase::AlreadyPlaced(placed)),
                (refused, _) => Err(refused),
            };
        }
        match self.mode {
            Mode::Zklock => {}
            Mode::Unlocked => return self.cart_read_check_write(req, None).await,
            Mode::Database | Mode::Redis(_) | Mode::Conditional => {
                return Err(ApiError::BadRequest(
                    "carts are sold under the zklock lock only; this instance runs another lock".into(),
                ))
            }
        }
        // The same lock names as single buys, so carts and single buys of an item exclude
        // each other. The multi-lock sorts them: the order of the lines does not matter.
        // Labelled with the single buy's template, so both count in the same metrics.
        let locks = req
            .lines
            .iter()
            .map(|l| {
                Ok(self
                    .locks
                    .mutex(&item_lock(l.item_id))?
                    .with_template(ITEM_LOCK_TEMPLATE))
            })
            .collect::<Result<Vec<_>, LockError>>()?;
        let guard = MultiLock::new(locks)?.acquire_timeout(LOCK_TIMEOUT).await?;
        guard.run(self.cart_read_check_write(req, Some(&guard))).await?
    }

    /// A cart's read-check-write: every item read and checked, then every line written in one
    /// transaction, fenced by the tokens of `guard` (none without the lock).
    async fn cart_read_check_write(
        &self,
        req: &CartRequest,
        guard: Option<&MultiGuard>,
    ) -> Result<CartPurchase, ApiError> {
        let placed = self.placed_cart(req).await?;
        if !placed.is_empty() {
            return Ok(CartPurchase::AlreadyPlaced(placed));
        }
        let items = self.cart_items(req, guard).await?;
        let writes: Vec<Write> = req
            .lines
            .iter()
            .zip(items)
            .map(|(line, item)| Write {
                item_id: line.item_id,
                new_stock: item.stock - line.qty,
                qty: line.qty,
                token: guard.and_then(|g| g.fencing_token_of(&item_lock(line.item_id))),
            })
            .collect();
        self.pause_in_race_window().await;
        Ok(CartPurchase::Placed(
            self.store.commit_cart(&req.request_id, &writes).await?,
        ))
    }

    /// Reads (claiming each with its lock's token, see `Store::claim`) the item of every line
    /// of a cart: the items, in line order, or [`ApiError::SoldOut`] for the first line that
    /// cannot be filled.
    async fn cart_items(&self, req: &CartRequest, guard: Option<&MultiGuard>) -> Result<Vec<Item>, ApiError> {
        let mut items = Vec::with_capacity(req.lines.len());
        for line in &req.lines {
            let token = guard.and_then(|g| g.fencing_token_of(&item_lock(line.item_id)));
            let item = self
                .store
                .claim(line.item_id, token)
                .await?
                .ok_or(ApiError::NoSuchItem(line.item_id))?;
            if item.stock < line.qty {
                return Err(ApiError::SoldOut {
                    item_id: line.item_id,
                    stock: item.stock,
                    qty: line.qty,
                });
            }
            items.push(item);
        }
        Ok(items)
    }

    /// The orders an earlier request with this cart's id placed (none if it placed none).
    async fn placed_cart(&self, req: &CartRequest) -> Result<Vec<Order>, ApiError> {
        let items: Vec<i64> = req.lines.iter().map(|l| l.item_id).collect();
        Ok(self.store.orders_for_request(&items, &req.request_id).await?)
    }

    /// Business work between the check and the write (pricing, risk checks…), stood in for by
    /// a short pause. It widens the window in which an unlocked competitor can read the same
    /// stock.
    async fn pause_in_race_window(&self) {
        if !self.race_window.is_zero() {
            tokio::time::sleep(self.race_window).await;
        }
    }

    /// The buy path under the cluster-wide lock `seckill:{item_id}`: at most one process in
    /// the cluster runs the read-check-write for one item at a time, and its write carries
    /// the lock's fencing token.
    #[distributed_lock("seckill:{item_id}", timeout = "10s", client = self.locks)]
    async fn buy_locked(&self, item_id: i64, req: &BuyRequest) -> Result<Purchase, ApiError> {
        let token = zklock::current_fencing_token();
        self.read_check_write(item_id, req, token).await
    }

    /// Read the stock, check it, write the new value back: correct only while nobody else
    /// does the same for this item in between.
    async fn read_check_write(
        &self,
        item_id: i64,
        req: &BuyRequest,
        token: Option<FencingToken>,
    ) -> Result<Purchase, ApiError> {
        // One connection for the sale's steps.
        let mut db = self.store.checkout().await?;
        // The read claims the item with the token: a paused holder that lost the lock can no
        // longer write once this read is done (see `Checkout::claim`).
        let item = match db.placed_or_claim(item_id, &req.request_id, token).await? {
            Placed::Already(order) => return Ok(Purchase::AlreadyPlaced(order)),
            Placed::Claimed(item) => item.ok_or(ApiError::NoSuchItem(item_id))?,
        };
        if item.stock < req.qty {
            return Err(ApiError::SoldOut {
                item_id,
                stock: item.stock,
                qty: req.qty,
            });
        }
        self.pause_in_race_window().await;
        let order = db
            .commit_purchase(item_id, item.stock - req.qty, req.qty, &req.request_id, token)
            .await?;
        Ok(Purchase::Placed(order))
    }
}

/// A sale decided in the database, as the buy path answers it.
fn purchase(item_id: i64, qty: i64, sale: Sale) -> Result<Purchase, ApiError> {
    match sale {
        Sale::Placed(order) => Ok(Purchase::Placed(order)),
        Sale::AlreadyPlaced(order) => Ok(Purchase::AlreadyPlaced(order)),
        Sale::SoldOut { stock } => Err(ApiError::SoldOut { item_id, stock, qty }),
    }
}

/// The name of an item's lock, shared by single buys and carts.
fn item_lock(item_id: i64) -> String {
    format!("seckill:{item_id}")
}

/// The template of [`item_lock`] names, as the attribute on the single buy writes it.
const ITEM_LOCK_TEMPLATE: &str = "seckill:{item_id}";

fn check_qty(qty: i64) -> Result<(), ApiError> {
    if (1..=MAX_QTY).contains(&qty) {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "qty must be between 1 and {MAX_QTY}, got {qty}"
        )))
    }
}

fn check_request_id(request_id: &str) -> Result<(), ApiError> {
    if request_id.is_empty() || request_id.len() > 128 {
        return Err(ApiError::BadRequest("request_id must have 1 to 128 characters".into()));
    }
    Ok(())
}

/// Parses a JSON body, turning every failure into a 400 with a JSON error.
fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|err| ApiError::BadRequest(format!("invalid JSON body: {err}")))
}

fn item_id(path: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|err| ApiError::BadRequest(format!("item id must be an integer: {err}")))
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

async fn create_item(State(inv): State<Arc<Inventory>>, body: Bytes) -> Result<Response, ApiError> {
    let new: NewItem = parse_body(&body)?;
    if new.stock < 0 {
        return Err(ApiError::BadRequest(format!(
            "stock must not be negative, got {}",
            new.stock
        )));
    }
    let item = inv.store.create_item(new.id, new.stock).await?;
    Ok((StatusCode::CREATED, Json(item)).into_response())
}

async fn get_item(
    State(inv): State<Arc<Inventory>>,
    path: Result<Path<i64>, PathRejection>,
) -> Result<Json<Item>, ApiError> {
    let id = item_id(path)?;
    inv.store.item(id).await?.map(Json).ok_or(ApiError::NoSuchItem(id))
}

async fn get_orders(
    State(inv): State<Arc<Inventory>>,
    path: Result<Path<i64>, PathRejection>,
) -> Result<Json<Vec<Order>>, ApiError> {
    let id = item_id(path)?;
    if inv.store.item(id).await?.is_none() {
        return Err(ApiError::NoSuchItem(id));
    }
    Ok(Json(inv.store.orders(id).await?))
}

async fn buy(
    State(inv): State<Arc<Inventory>>,
    path: Result<Path<i64>, PathRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = item_id(path)?;
    let req: BuyRequest = parse_body(&body)?;
    Ok(match inv.buy(id, &req).await? {
        Purchase::Placed(order) => (StatusCode::CREATED, Json(order)).into_response(),
        Purchase::AlreadyPlaced(order) => (StatusCode::OK, Json(order)).into_response(),
    })
}

async fn checkout(State(inv): State<Arc<Inventory>>, body: Bytes) -> Result<Response, ApiError> {
    let req: CartRequest = parse_body(&body)?;
    let (status, orders) = match inv.checkout(&req).await? {
        CartPurchase::Placed(orders) => (StatusCode::CREATED, orders),
        CartPurchase::AlreadyPlaced(orders) => (StatusCode::OK, orders),
    };
    Ok((status, Json(json!({ "request_id": req.request_id, "orders": orders }))).into_response())
}

async fn metrics(State(inv): State<Arc<Inventory>>) -> Result<String, ApiError> {
    inv.metrics
        .as_ref()
        .map(PrometheusHandle::render)
        .ok_or_else(|| ApiError::BadRequest("this instance serves no metrics".into()))
}

async fn not_found() -> ApiError {
    ApiError::BadRequest("no such route".into())
}

/// The service's routes.
pub fn router(inventory: Arc<Inventory>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/items", post(create_item))
        .route("/items/{id}", get(get_item))
        .route("/items/{id}/orders", get(get_orders))
        .route("/items/{id}/buy", post(buy))
        .route("/orders", post(checkout))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(inventory)
}

/// Builds the inventory a `serve` process runs: opens the database and configures (without
/// connecting) the lock client.
pub async fn inventory(args: &ServeArgs) -> Result<Inventory, Box<dyn std::error::Error + Send + Sync>> {
    let store = Store::open(&args.database).await?;
    // A service instance's runtime runs for the life of its process, so the lock client's
    // sessions run on it too: no thread of the client's own, and no hop to one per request.
    let locks = LockClient::builder(args.zk.clone())
        .session_timeout(args.zk_timeout)
        .connect_timeout(args.zk_timeout)
        .default_cache(args.lock_args.lock_cache)
        .runtime(tokio::runtime::Handle::current())
        .build()?;
    let inventory = Inventory::new(store, locks, !args.unsafe_no_lock, args.race_window);
    if args.unsafe_no_lock {
        return Ok(inventory);
    }
    let LockArgs {
        lock,
        redis,
        redis_ttl,
        lock_cache,
    } = &args.lock_args;
    if !lock_cache.is_zero() && *lock != LockKind::Zklock {
        return Err(format!(
            "--lock-cache caches zklock's locks; it means nothing with --lock {}",
            lock.name()
        )
        .into());
    }
    Ok(match lock {
        LockKind::Zklock => inventory,
        LockKind::Database => {
            if inventory.store.backend() != Backend::Postgres {
                return Err("--lock database is PostgreSQL's advisory lock: give a postgres:// --database".into());
            }
            inventory.with_database_lock()
        }
        LockKind::Redis => {
            let url = redis
                .as_deref()
                .ok_or("--lock redis needs --redis redis://host:port/")?;
            inventory.with_redis_lock(RedisLock::connect(url, *redis_ttl).await?)
        }
        LockKind::None => inventory.with_conditional_update(),
    })
}

/// Runs one service instance until it is stopped: SIGINT (Ctrl-C), SIGTERM, or, with
/// `--exit-with-stdin`, its standard input closing. Requests under way are finished, then the
/// lock client is closed, so the instance's ZooKeeper session ends at once rather than at its
/// timeout.
pub async fn serve(args: ServeArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Process-wide: one service instance per process.
    let handle = crate::metrics::install_recorder()?;
    let inventory = Arc::new(inventory(&args).await?.with_metrics(handle));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    println!("{}{addr}", super::driver::LISTENING);
    eprintln!(
        "seckill: serving on http://{addr} (lock: {}, zookeeper: {})",
        if args.unsafe_no_lock {
            "OFF"
        } else {
            args.lock_args.lock.name()
        },
        args.zk
    );
    let served = axum::serve(listener, router(inventory.clone()))
        .with_graceful_shutdown(stop_requested(args.exit_with_stdin))
        .await;
    inventory.locks.close().await;
    if let Some(expired) = inventory.redis_expired_releases() {
        eprintln!("seckill: {expired} Redis lock releases found their key expired or taken");
    }
    eprintln!("seckill: {addr} stopped; lock client closed");
    Ok(served?)
}

/// Resolves on SIGINT or SIGTERM, or when standard input closes if `with_stdin`.
async fn stop_requested(with_stdin: bool) {
    let stdin_closed = async {
        if !with_stdin {
            return std::future::pending().await;
        }
        let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            let _ = closed.send(());
        });
        let _ = on_close.await;
    };
    tokio::select! {
        _ = crate::shutdown::stop_requested() => {}
        _ = stdin_closed => {}
    }
}
