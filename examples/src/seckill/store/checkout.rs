//! One connection held for the steps of one sale: the request-id check, the claim and the
//! fenced write, each as few round trips as the database allows.

use sqlx::{Connection, Row};
use zklock::FencingToken;

use super::statements::{item_from_row, order_for_request_on, refusal, sell_in_one_statement, write_line};
use super::{now_ms, Backend, Item, Order, StoreError, Write};

/// One connection of a [`Store`](super::Store)'s pool, held for the steps of one request: the
/// request-id check, the claim and the write of a sale run on it one after the other. Returned
/// to the pool when dropped.
pub struct Checkout {
    pub(super) conn: sqlx::pool::PoolConnection<sqlx::Any>,
    pub(super) backend: Backend,
}

impl Checkout {
    /// Reads item `id`, or `None` if there is no such item.
    pub async fn item(&mut self, id: i64) -> Result<Option<Item>, StoreError> {
        let row = sqlx::query("SELECT id, stock, initial_stock, last_token FROM items WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *self.conn)
            .await?;
        row.as_ref().map(item_from_row).transpose()
    }

    /// Reads item `id` for a fenced read-check-write: with `token`, claims the item with it in
    /// the same statement (the item remembers `token` as the newest), so any holder with an
    /// older token is refused from then on ([`StoreError::Fenced`] if a newer token has
    /// claimed it already). Without `token`, a plain read. `None` if there is no such item.
    pub async fn claim(&mut self, id: i64, token: Option<FencingToken>) -> Result<Option<Item>, StoreError> {
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
        .fetch_optional(&mut *self.conn)
        .await?;
        match row {
            Some(row) => Ok(Some(item_from_row(&row)?)),
            None => self.claim_refused(id, token).await,
        }
    }

    /// Why a claim of item `id` with `offered` changed nothing: a newer token has claimed it
    /// ([`StoreError::Fenced`]), or there is no such item (`None`).
    async fn claim_refused(&mut self, id: i64, offered: String) -> Result<Option<Item>, StoreError> {
        match refusal(&mut self.conn, id, Some(offered)).await {
            StoreError::NoSuchItem(_) => Ok(None),
            err => Err(err),
        }
    }

    /// The first two steps of a sale: the order `request_id` already placed for item
    /// `item_id`, if any, else the item claimed with `token` ([`claim`](Self::claim); without
    /// a token, read). On PostgreSQL both in one statement (the claim is made only if no order
    /// is found), one round trip instead of two.
    pub async fn placed_or_claim(
        &mut self,
        item_id: i64,
        request_id: &str,
        token: Option<FencingToken>,
    ) -> Result<Placed, StoreError> {
        if self.backend != Backend::Postgres {
            if let Some(order) = self.order_for_request(item_id, request_id).await? {
                return Ok(Placed::Already(order));
            }
            return Ok(Placed::Claimed(self.claim(item_id, token).await?));
        }
        let token = token.map(|t| t.to_string());
        let query = match &token {
            Some(token) => sqlx::query(
                "WITH placed AS (
                     SELECT id FROM orders WHERE item_id = $1 AND request_id = $2 LIMIT 1
                 ), claimed AS (
                     UPDATE items SET last_token = $3
                     WHERE id = $1 AND (last_token IS NULL OR last_token <= $3)
                       AND NOT EXISTS (SELECT 1 FROM placed)
                     RETURNING id, stock, initial_stock, last_token
                 )
                 SELECT (SELECT count(*) FROM placed) AS placed,
                        c.id, c.stock, c.initial_stock, c.last_token
                 FROM (SELECT 1) AS one LEFT JOIN claimed c ON true",
            )
            .bind(item_id)
            .bind(request_id)
            .bind(token.as_str()),
            // Without a token, the check and a plain read.
            None => sqlx::query(
                "SELECT (SELECT count(*) FROM orders WHERE item_id = $1 AND request_id = $2) AS placed,
                        i.id, i.stock, i.initial_stock, i.last_token
                 FROM (SELECT 1) AS one LEFT JOIN items i ON i.id = $1",
            )
            .bind(item_id)
            .bind(request_id),
        };
        let row = query.fetch_one(&mut *self.conn).await?;
        if row.try_get::<i64, _>("placed")? > 0 {
            // A repeated request (rare): its order, read in full.
            return match self.order_for_request(item_id, request_id).await? {
                Some(order) => Ok(Placed::Already(order)),
                None => Err(StoreError::Database(sqlx::Error::RowNotFound)),
            };
        }
        if row.try_get::<Option<i64>, _>("id")?.is_none() {
            return Ok(Placed::Claimed(match token {
                Some(token) => self.claim_refused(item_id, token).await?,
                None => None,
            }));
        }
        Ok(Placed::Claimed(Some(item_from_row(&row)?)))
    }

    /// The order a request already placed, if any (so a retried request is not sold twice).
    pub async fn order_for_request(&mut self, item_id: i64, request_id: &str) -> Result<Option<Order>, StoreError> {
        order_for_request_on(&mut self.conn, item_id, request_id).await
    }

    /// Writes a purchase in one transaction: sets the item's stock to `new_stock` and inserts
    /// the order. Either both happen or neither does.
    ///
    /// With `token`, the write is fenced: it only applies if the item has not accepted a newer
    /// token ([`StoreError::Fenced`] otherwise), and the item remembers `token` as the newest.
    /// Equal tokens pass: they come from one hold of the lock, whose body may write twice.
    /// Without `token` (the service running without the lock) nothing is checked.
    pub async fn commit_purchase(
        &mut self,
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
        match (self.backend, token) {
            (Backend::Postgres, Some(token)) => return self.fenced_purchase(&line, token, request_id).await,
            (Backend::Postgres, None) => {
                let sold = sell_in_one_statement(
                    &mut self.conn,
                    "stock = $1 WHERE id = $2",
                    new_stock,
                    item_id,
                    qty,
                    request_id,
                );
                return sold.await?.ok_or(StoreError::NoSuchItem(item_id));
            }
            (Backend::Sqlite, _) => {}
        }
        let mut orders = self.commit(request_id, std::slice::from_ref(&line)).await?;
        Ok(orders.remove(0))
    }

    /// [`commit_purchase`](Self::commit_purchase) with a token, on PostgreSQL: the fenced stock
    /// write and the order insert in one statement (the insert reads the rows the update
    /// returns, so it inserts nothing when the write is refused), which PostgreSQL runs as one
    /// transaction: one round trip instead of four (`BEGIN`, the update, the insert,
    /// `COMMIT`). SQLite has no update inside `WITH`; it takes the transaction.
    async fn fenced_purchase(
        &mut self,
        line: &Write,
        token: FencingToken,
        request_id: &str,
    ) -> Result<Order, StoreError> {
        let token = token.to_string();
        let created_ms = now_ms();
        let id: Option<i64> = sqlx::query_scalar(
            "WITH taken AS (
                 UPDATE items SET stock = $1, last_token = $2
                 WHERE id = $3 AND (last_token IS NULL OR last_token <= $4)
                 RETURNING id
             )
             INSERT INTO orders (item_id, request_id, qty, token, created_ms)
             SELECT id, $5, $6, $7, $8 FROM taken
             RETURNING id",
        )
        .bind(line.new_stock)
        .bind(token.as_str())
        .bind(line.item_id)
        .bind(token.as_str())
        .bind(request_id)
        .bind(line.qty)
        .bind(token.as_str())
        .bind(created_ms)
        .fetch_optional(&mut *self.conn)
        .await?;
        let Some(id) = id else {
            return Err(refusal(&mut self.conn, line.item_id, Some(token)).await);
        };
        Ok(Order {
            id,
            item_id: line.item_id,
            request_id: request_id.to_owned(),
            qty: line.qty,
            token: Some(token),
            created_ms,
        })
    }

    pub(super) async fn commit(&mut self, request_id: &str, lines: &[Write]) -> Result<Vec<Order>, StoreError> {
        // Rows are written in one order, by item id: PostgreSQL locks each row it updates until
        // the transaction ends, so two transactions writing the same items in opposite orders
        // wait for each other until one is aborted with `deadlock detected` (after
        // `deadlock_timeout`, 1 s by default). With the distributed lock no two carts of an item
        // write at once, but without it (and for a holder that lost its lock) they do. SQLite
        // has one writer at a time and cannot deadlock here.
        let mut lines: Vec<&Write> = lines.iter().collect();
        lines.sort_by_key(|line| line.item_id);
        let mut tx = self.conn.begin().await?;
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

/// What [`Checkout::placed_or_claim`] found.
#[derive(Debug)]
pub enum Placed {
    /// The request had placed this order already; nothing was claimed.
    Already(Order),
    /// The item, claimed with the token (`None`: no such item).
    Claimed(Option<Item>),
}
