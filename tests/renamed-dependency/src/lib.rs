//! `#[distributed_lock]` with `zklock` renamed to `zk` in `Cargo.toml`. No crate named `zklock`
//! is in scope here, so this compiles only if the expansion names the crate `zk`.

#![deny(warnings)]

use zk::{distributed_lock, FencingToken, LockClient, LockError};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[distributed_lock("renamed:{id}", timeout = "1s")]
pub async fn free(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

pub struct Service {
    pub locks: LockClient,
}

impl Service {
    #[distributed_lock("renamed-method:{id}", client = self.locks, mode = "write", token = fence)]
    pub async fn method(&self, id: u32) -> Result<FencingToken, AppError> {
        Ok(fence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_reach_the_runtime_through_the_renamed_crate() {
        // No default client is installed.
        match free(1).await {
            Err(AppError::Lock(LockError::InvalidConfig { .. })) => {}
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
        // A client of a port nobody listens on.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let service = Service {
            locks: LockClient::builder(addr.to_string())
                .connect_timeout(std::time::Duration::from_millis(200))
                .build()
                .unwrap(),
        };
        match service.method(1).await {
            Err(AppError::Lock(LockError::Connection { .. } | LockError::Timeout { .. })) => {}
            other => panic!("expected a connection error, got {other:?}"),
        }
    }
}
