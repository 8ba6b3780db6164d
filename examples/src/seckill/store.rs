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
use sqlx::{AnyPool, Row};
use zklock::FencingToken;

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
        let row = sqlx::query("SELECT id, stock, initial_stock, last_token FROM items WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| {
            Ok(Item {
                id: row.try_get("id")?,
                stock: row.try_get("stock")?,
                initial_stock: row.try_get("initial_stock")?,
                last_token: row.try_get("last_token")?,
            })
        })
        .transpose()
    }

    /// Reads item `id` for a fenced read-check-write: with `token`, claims the item with it in
    /// the same statement (the item remembers `token` as the newest), so any holder with an
    /// older token is refused from then on ([`StoreError::Fenced`] if a newer token has
    /// claimed it already). Without `token`, a plain read. `None` if there is no such item.
    pub async fn claim(&self, id: i64, token: Option<FencingToken>) -> Result<Option<Item>, StoreError> {
        let Some(token) = token.map(|t| t.to_string()) else {
            return self.item(id).await;
        };
        let row = sqlx::query(
            "UPDATE items SET last_token = $1 WHERE id = $2 AND (last_token IS NULL OR last_token <= $3)
             RETURNING id, stock, initial_stock, last_token",
        )
        .bind(token.as_str())
        .bind(id)
        .bind(token.as_str())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => Ok(Some(Item {
                id: row.try_get("id")?,
                stock: row.try_get("stock")?,
                initial_stock: row.try_get("initial_stock")?,
                last_token: row.try_get("last_token")?,
            })),
            None => match self.item(id).await? {
                Some(Item {
                    last_token: Some(accepted),
                    ..
                }) => Err(StoreError::Fenced {
                    item_id: id,
                    offered: token,
                    accepted,
                }),
                _ => Ok(None),
            },
        }
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

    /// The order a request already placed, if any (so a retried request is not sold twice).
    pub async fn order_for_request(&self, item_id: i64, request_id: &str) -> Result<Option<Order>, StoreError> {
        let row = sqlx::query(
            "SELECT id, item_id, request_id, qty, token, created_ms FROM orders
             WHERE item_id = $1 AND request_id = $2 ORDER BY id LIMIT 1",
        )
        .bind(item_id)
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(order_from_row).transpose()
    }

    /// Writes a purchase in one transaction: sets the item's stock to `new_stock` and inserts
    /// the order. Either both happen or neither does.
    ///
    /// With `token`, the write is fenced: it only applies if the item has not accepted a newer
    /// token ([`StoreError::Fenced`] otherwise), and the item remembers `token` as the newest.
    /// Equal tokens pass: they come from one hold of the lock, whose body may write twice.
    /// Without `token` (the service running without the lock) nothing is checked.
    pub async fn commit_purchase(
        &self,
        item_id: i64,
        new_stock: i64,
        qty: i64,
        request_id: &str,
        token: Option<FencingToken>,
    ) -> Result<Order, StoreError> {
        let line = Write {
            item_id,
            new_stock,
            qty,
            token,
        };
        let mut orders = self.commit(request_id, std::slice::from_ref(&line)).await?;
        Ok(orders.remove(0))
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
        // Rows are written in one order, by item id: PostgreSQL locks each row it updates until
        // the transaction ends, so two transactions writing the same items in opposite orders
        // wait for each other until one is aborted with `deadlock detected` (after
        // `deadlock_timeout`, 1 s by default). With the distributed lock no two carts of an item
        // write at once, but without it (and for a holder that lost its lock) they do. SQLite
        // has one writer at a time and cannot deadlock here.
        let mut lines: Vec<&Write> = lines.iter().collect();
        lines.sort_by_key(|line| line.item_id);
        let mut tx = self.pool.begin().await?;
        let mut orders = Vec::with_capacity(lines.len());
        for line in lines {
            match write_line(&mut tx, request_id, line).await {
                Ok(order) => orders.push(order),
                Err(err) => {
                    tx.rollback().await?;
                    return Err(err);
                }
            }
        }
        tx.commit().await?;
        Ok(orders)
    }
}

/// What a purchase decided inside the database came to ([`Store::buy_under_advisory_lock`],
/// [`Store::buy_conditional`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sale {
    /// A new order was written.
    Placed(Order),
    /// This request id had already placed this order; nothing new was written.
    AlreadyPlaced(Order),
    /// Fewer units were left than asked for; nothing was written.
    SoldOut {
        /// Units left when the request was checked.
        stock: i64,
    },
}

impl Store {
    /// The purchase with the database as the lock: one transaction takes PostgreSQL's
    /// transaction-scoped advisory lock on the item (`pg_advisory_xact_lock(item_id)`, released
    /// by the commit or the rollback, also when the connection dies), then reads, checks, pauses
    /// for `race_window` and writes back exactly as the ZooKeeper-locked path does, unfenced.
    /// PostgreSQL only.
    pub async fn buy_under_advisory_lock(
        &self,
        item_id: i64,
        qty: i64,
        request_id: &str,
        race_window: std::time::Duration,
    ) -> Result<Sale, StoreError> {
        if self.backend != Backend::Postgres {
            return Err(StoreError::Database(sqlx::Error::Configuration(
                "the database lock is PostgreSQL's pg_advisory_xact_lock: give a postgres:// URL".into(),
            )));
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(item_id)
            .execute(&mut *tx)
            .await?;
        let placed = sqlx::query(
            "SELECT id, item_id, request_id, qty, token, created_ms FROM orders
             WHERE item_id = $1 AND request_id = $2 ORDER BY id LIMIT 1",
        )
        .bind(item_id)
        .bind(request_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = placed {
            tx.rollback().await?;
            return Ok(Sale::AlreadyPlaced(order_from_row(&row)?));
        }
        let stock: Option<i64> = sqlx::query_scalar("SELECT stock FROM items WHERE id = $1")
            .bind(item_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(stock) = stock else {
            tx.rollback().await?;
            return Err(StoreError::NoSuchItem(item_id));
        };
        if stock < qty {
            tx.rollback().await?;
            return Ok(Sale::SoldOut { stock });
        }
        if !race_window.is_zero() {
            tokio::time::sleep(race_window).await;
        }
        let line = Write {
            item_id,
            new_stock: stock - qty,
            qty,
            token: None,
        };
        let order = match write_line(&mut tx, request_id, &line).await {
            Ok(order) => order,
            Err(err) => {
                tx.rollback().await?;
                return Err(err);
            }
        };
        tx.commit().await?;
        Ok(Sale::Placed(order))
    }

    /// The purchase without any lock: one transaction takes the units with a conditional
    /// update (`SET stock = stock - qty WHERE stock >= qty`), which the database applies
    /// atomically, and inserts the order. It never oversells; it does not stop two requests with
    /// the same id from both buying, which takes a unique constraint or a lock.
    pub async fn buy_conditional(&self, item_id: i64, qty: i64, request_id: &str) -> Result<Sale, StoreError> {
        let mut tx = self.pool.begin().await?;
        let taken = sqlx::query("UPDATE items SET stock = stock - $1 WHERE id = $2 AND stock >= $3")
            .bind(qty)
            .bind(item_id)
            .bind(qty)
            .execute(&mut *tx)
            .await?;
        if taken.rows_affected() == 0 {
            tx.rollback().await?;
            return match self.item(item_id).await? {
                Some(item) => Ok(Sale::SoldOut { stock: item.stock }),
                None => Err(StoreError::NoSuchItem(item_id)),
            };
        }
        let order = insert_order(&mut tx, item_id, request_id, qty, None).await?;
        tx.commit().await?;
        Ok(Sale::Placed(order))
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

/// The fenced stock write and the order insert of one line, inside the caller's transaction.
async fn write_line(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    request_id: &str,
    line: &Write,
) -> Result<Order, StoreError> {
    let Write {
        item_id,
        new_stock,
        qty,
        token,
    } = *line;
    let token_text = token.map(|t| t.to_string());
    // The UPDATE comes first in the transaction, so SQLite takes its write lock at once
    // (waiting out other writers with busy_timeout) instead of upgrading from a read lock,
    // which could fail with SQLITE_BUSY when two processes race.
    let updated = match &token_text {
        Some(token) => {
            sqlx::query(
                "UPDATE items SET stock = $1, last_token = $2
                 WHERE id = $3 AND (last_token IS NULL OR last_token <= $4)",
            )
            .bind(new_stock)
            .bind(token.as_str())
            .bind(item_id)
            .bind(token.as_str())
            .execute(&mut **tx)
            .await?
        }
        None => {
            sqlx::query("UPDATE items SET stock = $1 WHERE id = $2")
                .bind(new_stock)
                .bind(item_id)
                .execute(&mut **tx)
                .await?
        }
    };
    if updated.rows_affected() == 0 {
        let accepted: Option<Option<String>> = sqlx::query_scalar("SELECT last_token FROM items WHERE id = $1")
            .bind(item_id)
            .fetch_optional(&mut **tx)
            .await?;
        return Err(match (accepted, token_text) {
            (Some(Some(accepted)), Some(offered)) => StoreError::Fenced {
                item_id,
                offered,
                accepted,
            },
            _ => StoreError::NoSuchItem(item_id),
        });
    }
    insert_order(tx, item_id, request_id, qty, token_text).await
}

/// Inserts an order inside the caller's transaction.
async fn insert_order(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    item_id: i64,
    request_id: &str,
    qty: i64,
    token_text: Option<String>,
) -> Result<Order, StoreError> {
    let created_ms = now_ms();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (item_id, request_id, qty, token, created_ms)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(item_id)
    .bind(request_id)
    .bind(qty)
    .bind(token_text.clone())
    .bind(created_ms)
    .fetch_one(&mut **tx)
    .await?;
    Ok(Order {
        id,
        item_id,
        request_id: request_id.to_owned(),
        qty,
        token: token_text,
        created_ms,
    })
}

fn order_from_row(row: &sqlx::any::AnyRow) -> Result<Order, StoreError> {
    Ok(Order {
        id: row.try_get("id")?,
        item_id: row.try_get("item_id")?,
        request_id: row.try_get("request_id")?,
        qty: row.try_get("qty")?,
        token: row.try_get("token")?,
        created_ms: row.try_get("created_ms")?,
    })
}
