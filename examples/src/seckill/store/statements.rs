//! Statements the sale paths share, each on a connection or transaction the caller holds.

use sqlx::Row;

use super::{now_ms, Item, Order, StoreError, Write};

/// The order `request_id` placed for item `item_id`, if any, read on `conn`.
pub(super) async fn order_for_request_on(
    conn: &mut sqlx::AnyConnection,
    item_id: i64,
    request_id: &str,
) -> Result<Option<Order>, StoreError> {
    let row = sqlx::query(
        "SELECT id, item_id, request_id, qty, token, created_ms FROM orders
         WHERE item_id = $1 AND request_id = $2 ORDER BY id LIMIT 1",
    )
    .bind(item_id)
    .bind(request_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(order_from_row).transpose()
}

/// On PostgreSQL, an unfenced sale in one statement: `UPDATE items SET <set_where>` (its two
/// parameters `$1` = `value` and `$2` = `item_id`), then the order of `qty` units for
/// `request_id` inserted for the row it updated. `None` when it updated no row. PostgreSQL runs
/// the statement as one transaction, or inside the caller's.
pub(super) async fn sell_in_one_statement(
    conn: &mut sqlx::AnyConnection,
    set_where: &str,
    value: i64,
    item_id: i64,
    qty: i64,
    request_id: &str,
) -> Result<Option<Order>, StoreError> {
    let created_ms = now_ms();
    let id: Option<i64> = sqlx::query_scalar(&format!(
        "WITH taken AS (UPDATE items SET {set_where} RETURNING id)
         INSERT INTO orders (item_id, request_id, qty, token, created_ms)
         SELECT id, $3, $4, NULL, $5 FROM taken
         RETURNING id"
    ))
    .bind(value)
    .bind(item_id)
    .bind(request_id)
    .bind(qty)
    .bind(created_ms)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(id.map(|id| Order {
        id,
        item_id,
        request_id: request_id.to_owned(),
        qty,
        token: None,
        created_ms,
    }))
}

/// The fenced stock write and the order insert of one line, inside the caller's transaction.
pub(super) async fn write_line(
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
        return Err(refusal(tx, item_id, token_text).await);
    }
    insert_order(tx, item_id, request_id, qty, token_text).await
}

/// Why a stock write of item `item_id` offering `offered` changed no row: a newer token took
/// the item ([`StoreError::Fenced`]), or there is no such item.
pub(super) async fn refusal(conn: &mut sqlx::AnyConnection, item_id: i64, offered: Option<String>) -> StoreError {
    let accepted: Option<Option<String>> = match sqlx::query_scalar("SELECT last_token FROM items WHERE id = $1")
        .bind(item_id)
        .fetch_optional(&mut *conn)
        .await
    {
        Ok(accepted) => accepted,
        Err(err) => return err.into(),
    };
    match (accepted, offered) {
        (Some(Some(accepted)), Some(offered)) => StoreError::Fenced {
            item_id,
            offered,
            accepted,
        },
        _ => StoreError::NoSuchItem(item_id),
    }
}

/// Inserts an order inside the caller's transaction.
pub(super) async fn insert_order(
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

pub(super) fn item_from_row(row: &sqlx::any::AnyRow) -> Result<Item, StoreError> {
    Ok(Item {
        id: row.try_get("id")?,
        stock: row.try_get("stock")?,
        initial_stock: row.try_get("initial_stock")?,
        last_token: row.try_get("last_token")?,
    })
}

pub(super) fn order_from_row(row: &sqlx::any::AnyRow) -> Result<Order, StoreError> {
    Ok(Order {
        id: row.try_get("id")?,
        item_id: row.try_get("item_id")?,
        request_id: row.try_get("request_id")?,
        qty: row.try_get("qty")?,
        token: row.try_get("token")?,
        created_ms: row.try_get("created_ms")?,
    })
}
