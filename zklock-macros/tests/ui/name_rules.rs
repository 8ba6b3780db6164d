// Names ZooKeeper refuses are compile errors when the attribute can tell: the whole name if it
// is fixed, the fixed text around placeholders otherwise.
use zklock::{distributed_lock, LockError};

#[distributed_lock(".")]
async fn dot() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("..")]
async fn dot_dot() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")]
async fn too_long() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy:{id}")]
async fn fixed_text_too_long(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[distributed_lock("lock:🔒")]
async fn outside_the_bmp() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("user:{id}:😀")]
async fn outside_the_bmp_in_a_template(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[distributed_lock("tab:{id}\there")]
async fn control_character(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[distributed_lock("private:")]
async fn private_use() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("{tenant}/{id}")]
async fn slash_between_placeholders(tenant: &str, id: u32) -> Result<u32, LockError> {
    let _ = tenant;
    Ok(id)
}

fn main() {}
