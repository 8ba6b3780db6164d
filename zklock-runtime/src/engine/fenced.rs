//! Writes to ZooKeeper fenced by a hold: a batch of operations sent as one `multi` that begins
//! with a check of the hold's own node, so the server applies the batch only while that node
//! exists — etcd's `IsOwner` compare in a transaction, for state that lives in ZooKeeper
//! itself (configuration, offsets, assignments).
//!
//! A stale holder (its session expired, or its node deleted by an operator) cannot slip a
//! write in: the check fails on the server, in the same transaction, and nothing in the batch
//! is applied. No clock and no timing argument is involved, unlike a check made before the
//! write.

use zookeeper_client as zk;

use crate::engine::guard::LockGuard;
use crate::error::{is_session_over, is_transient, LockError};

impl LockGuard {
    /// Applies a batch of ZooKeeper writes only while this hold's node exists, as one
    /// transaction (`multi`): `build` adds the operations (create, set data, delete, check)
    /// to a [`zk::MultiWriter`], and the batch goes to the server behind a check of the
    /// hold's node. Either every operation is applied, or none is.
    ///
    /// Returns the results of `build`'s operations, in order (the fence's own check is left
    /// out).
    ///
    /// Errors, none of which applied anything:
    /// - [`LockError::Lost`] when the hold was already reported lost: the batch is not sent;
    /// - [`LockError::NotHeld`] when the server no longer has the hold's node (an operator
    ///   deleted it) or the session is over (it expired: its nodes went with it);
    /// - [`LockError::WriteRejected`] when one of `build`'s operations failed (a node that
    ///   exists, a bad version, an invalid path), with its index;
    ///
    /// and one that may have: [`LockError::Connection`] when the connection dropped before the
    /// answer came. The batch is not sent again (a retried create or a retried version-checked
    /// write is not the same request); read the state back and decide.
    ///
    /// The fence is the node, not its owner: it holds while nobody re-creates a deleted
    /// holder node under its exact name (the names carry a random UUID, so only a deliberate
    /// copy does). See docs/safety.md, "Fenced ZooKeeper writes".
    ///
    /// # Cancel safety
    ///
    /// The batch is on the wire once this is first polled; dropping the future before its
    /// answer leaves the outcome unknown to the caller, as a lost connection would.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("partition-assignment")?.acquire().await?;
    /// guard
    ///     .fenced_write(|batch| {
    ///         batch.add_set_data("/assignments/orders", b"worker-3", None)?;
    ///         batch.add_delete("/assignments/pending/orders", None)
    ///     })
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fenced_write<F>(&self, build: F) -> Result<Vec<zk::MultiWriteResult>, LockError>
    where
        F: FnOnce(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error>,
    {
        if self.is_lost() {
            return Err(self.lost().await);
        }
        self.fenced_write_unchecked(build).await
    }

    /// The batch as the server sees it, without the local look at the hold's state first: the
    /// server's check of the node is then the only fence (tests use this to show it is one).
    pub(crate) async fn fenced_write_unchecked<F>(&self, build: F) -> Result<Vec<zk::MultiWriteResult>, LockError>
    where
        F: FnOnce(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error>,
    {
        let name = self.name();
        let not_held = || LockError::NotHeld { name: name.to_owned() };
        let zk = self.zk().map_err(|_| not_held())?;
        let mut batch = zk.new_multi_writer();
        let fence = batch.add_check_version(self.node_path(), -1);
        fence.map_err(|source| LockError::zk("fenced write check", source))?;
        // Operation `i` of the caller's is operation `i + 1` of the multi.
        build(&mut batch).map_err(|source| rejected(name, None, source))?;
        match batch.commit().await {
            Ok(mut results) => {
                results.remove(0);
                Ok(results)
            }
            Err(zk::MultiWriteError::OperationFailed { index: 0, source }) => match source {
                zk::Error::NoNode => Err(not_held()),
                source => Err(LockError::zk("fenced write check", source)),
            },
            Err(zk::MultiWriteError::OperationFailed { index, source }) => Err(rejected(name, Some(index - 1), source)),
            Err(zk::MultiWriteError::RequestFailed { source }) if is_session_over(&source) => Err(not_held()),
            Err(zk::MultiWriteError::RequestFailed { source }) if is_transient(&source) => {
                Err(LockError::connection_from(
                    format!("fenced write under lock `{name}` may or may not have been applied"),
                    source,
                ))
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => Err(LockError::zk("fenced write", source)),
        }
    }
}

/// The error of a batch refused for one of the caller's operations: by the server (`index`
/// says which), or while it was being built (the client library checks paths as they are
/// added; no index).
fn rejected(name: &str, index: Option<usize>, source: zk::Error) -> LockError {
    LockError::WriteRejected {
        name: name.to_owned(),
        index,
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::test_server::{setup, Setup};

    /// The server's check is a fence of its own: with the local look at the hold's state left
    /// out, a batch of a holder whose node is gone is still refused whole.
    #[tokio::test]
    async fn the_servers_check_alone_refuses_a_stale_batch() {
        let Setup {
            server: _server,
            client,
            view,
        } = setup(Duration::from_secs(4)).await;
        let guard = client.mutex("fence").unwrap().acquire().await.unwrap();
        view.delete(guard.node_path(), None).await.unwrap();
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

        let outcome = guard
            .fenced_write_unchecked(|batch| batch.add_create("/stale-write", b"", &persistent))
            .await;

        assert!(matches!(outcome, Err(LockError::NotHeld { .. })), "{outcome:?}");
        assert_eq!(view.check_stat("/stale-write").await.unwrap(), None);
    }
}
