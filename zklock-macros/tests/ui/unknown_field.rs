// Fields after the first segment are the compiler's to check; its error must stay at the
// literal without offering to rewrite the whole literal into the field it guesses.
use zklock::{distributed_lock, LockError};

pub struct Order {
    pub id: u64,
    pub region: String,
}

#[distributed_lock("order:{order.idd}")]
async fn similar_field(order: &Order) -> Result<u64, LockError> {
    Ok(order.id)
}

pub struct Store {
    region: String,
}

impl Store {
    #[distributed_lock("store:{self.regoin}:{pair.2}")]
    async fn similar_self_field(&self, pair: (u8, u8)) -> Result<usize, LockError> {
        Ok(self.region.len() + usize::from(pair.0))
    }
}

fn main() {}
