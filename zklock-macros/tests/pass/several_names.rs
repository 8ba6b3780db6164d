// Several names, filled in from parameters and fields, with `max_hold`, on free functions and
// methods.
#![deny(warnings)]

use zklock::{distributed_lock, LockClient, LockError};

#[distributed_lock("account:{from}", "account:{to}", timeout = "5s", max_hold = "30s")]
async fn transfer(from: u64, to: u64, cents: u64) -> Result<u64, LockError> {
    let debit = zklock::current_fencing_token_for(&format!("account:{from}"));
    let credit = zklock::current_fencing_token_for(&format!("account:{to}"));
    let _ = (debit, credit);
    Ok(cents)
}

pub struct Line {
    pub item: u64,
}

struct Shop {
    locks: LockClient,
    region: String,
}

impl Shop {
    #[distributed_lock("stock:{self.region}:{a.item}", "stock:{self.region}:{b.item}", "audit", client = self.locks)]
    async fn swap(&self, a: &Line, b: &Line) -> Result<(), LockError> {
        let _ = (a.item, b.item);
        Ok(())
    }

    #[distributed_lock("report", max_hold = "1m30s", on_lost = "continue", client = self.locks)]
    async fn report(&self) -> Result<(), LockError> {
        Ok(())
    }
}

async fn checkout(shop: &Shop) -> Result<u64, LockError> {
    shop.swap(&Line { item: 1 }, &Line { item: 2 }).await?;
    shop.report().await?;
    transfer(1, 2, 3).await
}

pub fn main() {
    let _ = checkout;
    let _ = |locks: LockClient| Shop {
        locks,
        region: "eu".into(),
    };
}
