// `crate = path` points the expansion at zklock through a re-export or an alias, for crates
// that do not depend on `zklock` under that name.
#![deny(warnings)]

mod reexport {
    pub use zklock as locks;
}

mod nested {
    pub mod deeper {
        pub use zklock;
    }
}

use zklock as zk;

#[derive(Debug)]
enum AppError {
    Lock(zk::LockError),
}

impl From<zk::LockError> for AppError {
    fn from(err: zk::LockError) -> Self {
        AppError::Lock(err)
    }
}

#[zk::distributed_lock("through-alias:{id}", crate = zk)]
async fn through_alias(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

#[reexport::locks::distributed_lock("through-reexport", crate = reexport::locks, timeout = "10 sec")]
async fn through_reexport() -> Result<(), AppError> {
    Ok(())
}

#[zk::distributed_lock("serde-style", crate = "crate::crate_option::nested::deeper::zklock", token = fence)]
async fn serde_style() -> Result<zk::FencingToken, AppError> {
    Ok(fence)
}

struct Service {
    locks: zk::LockClient,
}

impl Service {
    #[zk::distributed_lock("method:{id}", crate = ::zklock, client = self.locks)]
    async fn method(&self, id: u32) -> Result<u32, AppError> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
pub async fn main() {
    // No default client is installed: each call reaches the runtime, which says so through
    // the function's error type.
    for result in [through_alias(1).await.map(drop), through_reexport().await, serde_style().await.map(drop)] {
        match result {
            Err(AppError::Lock(zk::LockError::InvalidConfig { .. })) => {}
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    let _ = Service::method;
}
