use zklock::{distributed_lock, LockError};

#[distributed_lock("inventory:{skus}")]
async fn deduct(sku: &str, qty: u32) -> Result<u32, LockError> {
    let _ = sku;
    Ok(qty)
}

struct Free;

impl Free {
    #[distributed_lock("region:{self.region}")]
    async fn no_field(&self) -> Result<(), LockError> {
        Ok(())
    }
}

#[distributed_lock("region:{self.region}")]
async fn no_self() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("order:{}")]
async fn positional(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

struct Store;

impl Store {
    #[distributed_lock("inventory:{skew}:{qty}")]
    async fn reserve(&self, sku: &str, qty: u32) -> Result<u32, LockError> {
        let _ = sku;
        Ok(qty)
    }
}

fn main() {}
