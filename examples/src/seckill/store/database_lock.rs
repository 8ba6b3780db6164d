//! The sale under the peers the bench compares zklock with: PostgreSQL's advisory lock, and
//! no lock at all (a conditional update).

use sqlx::{Connection, Row};

use super::statements::{insert_order, order_for_request_on, sell_in_one_statement};
use super::{Backend, Checkout, Order, Store, StoreError};

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
        // A statement of its own after the lock's: its snapshot then sees the previous holder's
        // commit. The request-id check and the read in one round trip.
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM orders WHERE item_id = $1 AND request_id = $2) AS placed,
                    (SELECT stock FROM items WHERE id = $3) AS stock",
        )
        .bind(item_id)
        .bind(request_id)
        .bind(item_id)
        .fetch_one(&mut *tx)
        .await?;
        if row.try_get::<i64, _>("placed")? > 0 {
            let placed = order_for_request_on(&mut tx, item_id, request_id).await?;
            tx.rollback().await?;
            return placed
                .map(Sale::AlreadyPlaced)
                .ok_or(StoreError::Database(sqlx::Error::RowNotFound));
        }
        let Some(stock) = row.try_get::<Option<i64>, _>("stock")? else {
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
        let sold = sell_in_one_statement(
            &mut tx,
            "stock = $1 WHERE id = $2",
            stock - qty,
            item_id,
            qty,
            request_id,
        )
        .await;
        let order = match sold {
            Ok(Some(order)) => order,
            Ok(None) => {
                tx.rollback().await?;
                return Err(StoreError::NoSuchItem(item_id));
            }
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
        self.checkout().await?.buy_conditional(item_id, qty, request_id).await
    }
}

impl Checkout {
    /// [`Store::buy_conditional`] on this connection. On PostgreSQL the conditional update and
    /// the order insert are one statement (one transaction, one round trip); SQLite, which has
    /// no update inside `WITH`, takes a transaction.
    pub async fn buy_conditional(&mut self, item_id: i64, qty: i64, request_id: &str) -> Result<Sale, StoreError> {
        let sold = if self.backend == Backend::Postgres {
            sell_in_one_statement(
                &mut self.conn,
                "stock = stock - $1 WHERE id = $2 AND stock >= $1",
                qty,
                item_id,
                qty,
                request_id,
            )
            .await?
        } else {
            let mut tx = self.conn.begin().await?;
            let taken = sqlx::query("UPDATE items SET stock = stock - $1 WHERE id = $2 AND stock >= $3")
                .bind(qty)
                .bind(item_id)
                .bind(qty)
                .execute(&mut *tx)
                .await?;
            if taken.rows_affected() == 0 {
                tx.rollback().await?;
                None
            } else {
                let order = insert_order(&mut tx, item_id, request_id, qty, None).await?;
                tx.commit().await?;
                Some(order)
            }
        };
        match sold {
            Some(order) => Ok(Sale::Placed(order)),
            None => match self.item(item_id).await? {
                Some(item) => Ok(Sale::SoldOut { stock: item.stock }),
                None => Err(StoreError::NoSuchItem(item_id)),
            },
        }
    }
}
