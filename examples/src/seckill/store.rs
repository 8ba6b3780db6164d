//! Inventory and orders in a real database: a SQLite file (default) or PostgreSQL.
//!
//! The purchase is split the way a careless service would write it, on purpose: the stock is
//! read first ([`Store::item`]), checked by the caller, and then written back as an absolute
//! value computed from that read ([`Store::commit_purchase`]). Two buyers that read the same
//! stock both succeed and both write `stock - 1`: a lost update, and the orders outnumber the
//! units sold. The database does not hide this race, because the write is `SET stock = $new`,
//! not `SET stock = stock - 1`. The distributed lock around the read and the write is what
//! makes the sequence safe.
//!
//! The read and the write are both *fenced* by the lock's [`FencingToken`]: the read claims the
//! item with the token ([`Store::claim`]) and the database refuses the write when the item has
//! since been claimed with a newer one. A holder that was paused (GC, swap, a stalled VM) past
//! the loss of its lock, and whose lock was then granted to someone else, cannot write when it
//! wakes up: the newer holder claimed the item before reading it. Fencing the write alone is not
//! enough for a read-modify-write: a stale holder that wrote after the newer holder's read but
//! before its write would get its write in, and both would sell the last unit.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::AnyPool;
use zklock::FencingToken;

mod checkout;
mod database_lock;
mod statements;

pub use checkout::{Checkout, Placed};
pub use database_lock::Sale;
use statements::order_from_row;

/// Which database engine a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file (WAL mode, shared by several processes).
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// One item on sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// The item's id.
    pub id: i64,
    /// Units left.
    pub stock: i64,
    /// Units the item was created with.
    pub initial_stock: i64,
    /// The newest fencing token a write to this item carried (`None` before the first fenced
    /// write).
    pub last_token: Option<String>,
}

/// One order: `qty` units of `item_id` bought by the request `request_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Order {
    /// Database-assigned order number.
    pub id: i64,
    /// The item bought.
    pub item_id: i64,
    /// The client-chosen id of the buy request (a retried request reuses it).
    pub request_id: String,
    /// Units bought.
    pub qty: i64,
    /// The fencing token the write carried (`None` when the service runs without the lock).
    pub token: Option<String>,
    /// When the order was written, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// Why a database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The item does not exist.
    #[error("no item {0}")]
    NoSuchItem(i64),
    /// An item with this id already exists.
    #[error("item {0} already exists")]
    ItemExists(i64),
    /// The write carried a token older than the one the item last accepted.
    #[error("write for item {item_id} carried fencing token {offered}, older than the accepted {accepted}")]
    Fenced {
        /// The item written.
        item_id: i64,
        /// The token the refused write carried.
        offered: String,
        /// The newest token the item has accepted.
        accepted: String,
    },
    /// The database itself failed (unreachable, busy past its timeout, I/O error…).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// A connection pool plus the schema and queries of the seckill service.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

/// The database URL of a SQLite file at `path` (created if missing).
pub fn sqlite_url(path: &std::path::Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens a pool on `url` (`sqlite://…` or `postgres://…`) and creates the tables if they
    /// are missing.
    ///
    /// SQLite connections use WAL mode and a 10 s busy timeout, so several service processes
    /// can share one file: readers never block, and writers queue instead of failing.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                format!("unsupported database URL {url:?} (expected sqlite://… or postgres://…)").into(),
            )));
        };
        let options: AnyConnectOptions = url.parse()?;
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(10))
            // No ping on every checkout (a round trip, inside the lock for the zklock sale): a
            // dead connection fails its statement instead, which the request reports.
            .test_before_acquire(false)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // Set busy_timeout first: switching to WAL needs the write lock,
                        // which another process may be holding.
                        sqlx::query("PRAGMA busy_timeout = 10000").execute(&mut *conn).await?;
                        sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let store = Store { pool, backend };
        store.create_schema().await?;
        Ok(store)
    }

    /// The engine behind this store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    async fn create_schema(&self) -> Result<(), StoreError> {
        let statements: &[&str] = match self.backend {
            Backend::Sqlite => &[
                "CREATE TABLE IF NOT EXISTS items (
                    id INTEGER PRIMARY KEY,
                    stock INTEGER NOT NULL,
                    initial_stock INTEGER NOT NULL,
                    last_token TEXT)",
                "CREATE TABLE IF NOT EXISTS orders (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    item_id INTEGER NOT NULL REFERENCES items(id),
                    request_id TEXT NOT NULL,
                    qty INTEGER NOT NULL,
                    token TEXT,
                    created_ms INTEGER NOT NULL)",
                "CREATE INDEX IF NOT EXISTS orders_by_request ON orders (item_id, request_id)",
            ],
            // COLLATE "C": tokens compare byte by byte, whatever the database's locale.
            Backend::Postgres => &[
                "CREATE TABLE IF NOT EXISTS items (
                    id BIGINT PRIMARY KEY,
                    stock BIGINT NOT NULL,
                    initial_stock BIGINT NOT NULL,
                    last_token TEXT COLLATE \"C\")",
                "CREATE TABLE IF NOT EXISTS orders (
                    id BIGSERIAL PRIMARY KEY,
                    item_id BIGINT NOT NULL REFERENCES items(id),
                    request_id TEXT NOT NULL,
                    qty BIGINT NOT NULL,
                    token TEXT COLLATE \"C\",
                    created_ms BIGINT NOT NULL)",
                "CREATE INDEX IF NOT EXISTS orders_by_request ON orders (item_id, request_id)",
            ],
        };
        for statement in statements {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        Ok(())
    }

    /// Creates item `id` with `stock` units; [`StoreError::ItemExists`] if the id is taken.
    pub async fn create_item(&self, id: i64, stock: i64) -> Result<Item, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO items (id, stock, initial_stock, last_token) VALUES ($1, $2, $3, NULL)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(stock)
        .bind(stock)
        .execute(&self.pool)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::ItemExists(id));
        }
        Ok(Item {
            id,
            stock,
            initial_stock: stock,
            last_token: None,
        })
    }

    /// Reads item `id`, or `None` if there is no such item.
    pub async fn item(&self, id: i64) -> Result<Option<Item>, StoreError> {
        self.checkout().await?.item(id).await
    }

    /// [`Checkout::claim`] on a connection of its own.
    pub async fn claim(&self, id: i64, token: Option<FencingToken>) -> Result<Option<Item>, StoreError> {
        self.checkout().await?.claim(id, token).await
    }

    /// All orders of item `id`, oldest first.
    pub async fn orders(&self, item_id: i64) -> Result<Vec<Order>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, item_id, request_id, qty, token, created_ms FROM orders
             WHERE item_id = $1 ORDER BY id",
        )
        .bind(item_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(order_from_row).collect()
    }

    /// [`Checkout::order_for_request`] on a connection of its own.
    pub async fn order_for_request(&self, item_id: i64, request_id: &str) -> Result<Option<Order>, StoreError> {
        self.checkout().await?.order_for_request(item_id, request_id).await
    }

    /// [`Checkout::commit_purchase`] on a connection of its own.
    pub async fn commit_purchase(
        &self,
        item_id: i64,
        new_stock: i64,
        qty: i64,
        request_id: &str,
        token: Option<FencingToken>,
    ) -> Result<Order, StoreError> {
        self.checkout()
            .await?
            .commit_purchase(item_id, new_stock, qty, request_id, token)
            .await
    }

    /// Writes a cart in one transaction: one fenced stock write and one order per line, all
    /// under `request_id`. Either every line is written or none is: a refused line (a stale
    /// token, a missing item) rolls the whole cart back.
    ///
    /// The lines are written in item-id order, whatever order they come in, and the orders
    /// are returned in that order (oldest first, as [`Store::orders_for_request`] lists them).
    pub async fn commit_cart(&self, request_id: &str, lines: &[Write]) -> Result<Vec<Order>, StoreError> {
        self.commit(request_id, lines).await
    }

    /// The orders a request placed, for the given items (a cart's lines; one item for a single
    /// buy), oldest first.
    pub async fn orders_for_request(&self, items: &[i64], request_id: &str) -> Result<Vec<Order>, StoreError> {
        let mut orders = Vec::new();
        for &item_id in items {
            if let Some(order) = self.order_for_request(item_id, request_id).await? {
                orders.push(order);
            }
        }
        orders.sort_by_key(|o| o.id);
        Ok(orders)
    }

    async fn commit(&self, request_id: &str, lines: &[Write]) -> Result<Vec<Order>, StoreError> {
        self.checkout().await?.commit(request_id, lines).await
    }

    /// A connection of the pool, held for the steps of one request: taken from the pool (and
    /// health-checked by it, a round trip) once instead of once per step.
    pub async fn checkout(&self) -> Result<Checkout, StoreError> {
        Ok(Checkout {
            conn: self.pool.acquire().await?,
            backend: self.backend,
        })
    }
}

/// One stock write of a purchase: item `item_id` goes to `new_stock` after selling `qty`,
/// fenced by `token` if there is one (see [`Store::commit_purchase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// The item written.
    pub item_id: i64,
    /// Its stock after the sale.
    pub new_stock: i64,
    /// Units sold.
    pub qty: i64,
    /// The fencing token of the item's lock, or `None` without the lock.
    pub token: Option<FencingToken>,
}
