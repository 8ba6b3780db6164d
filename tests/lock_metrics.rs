//! Lock events through the `metrics` facade (feature `metrics`): counted per lock kind and name
//! *template*, never per filled-in name, with wait and hold times; read back through a real
//! Prometheus exporter.
#![cfg(feature = "metrics")]

mod support;

use metrics_exporter_prometheus::PrometheusBuilder;
use support::{client, server, AppError};
use zklock::{distributed_lock, LockClient, LockError};
use zklock_testing::FaultProxy;

struct Shop {
    locks: LockClient,
}

impl Shop {
    #[distributed_lock("inventory:{sku}", timeout = "5s", client = self.locks)]
    async fn deduct(&self, sku: u32) -> Result<(), AppError> {
        if sku == 1 {
            // Re-enters the hold of the outer call.
            self.deduct_again(sku).await?;
        }
        Ok(())
    }

    #[distributed_lock("inventory:{sku}", client = self.locks)]
    async fn deduct_again(&self, sku: u32) -> Result<(), AppError> {
        let _ = sku;
        Ok(())
    }

    #[distributed_lock("inventory:{sku}", timeout = "200ms", client = self.locks)]
    async fn try_deduct(&self, sku: u32) -> Result<(), AppError> {
        let _ = sku;
        Ok(())
    }

    #[distributed_lock("report", max_hold = "100ms", client = self.locks)]
    async fn hang(&self) -> Result<(), AppError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_events_are_counted_per_template_with_wait_and_hold_times() {
    // The only test of this binary: the recorder is process-wide.
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("install the recorder");
    let zk = server();
    let shop = Shop {
        locks: client(&zk.connect_string()).await,
    };
    for sku in 1..=3 {
        shop.deduct(sku).await.unwrap();
    }
    shop.deduct(2).await.unwrap();
    // Someone else holds inventory:3: the attribute times out.
    let other = client(&zk.connect_string()).await;
    let held = other.mutex("inventory:3").unwrap().acquire().await.unwrap();
    assert!(matches!(
        shop.try_deduct(3).await,
        Err(AppError::Lock(LockError::Timeout { .. }))
    ));
    drop(held);
    assert!(matches!(
        shop.hang().await,
        Err(AppError::Lock(LockError::MaxHoldExceeded { .. }))
    ));
    shop.locks.flush().await;
    other.flush().await;

    // A node handed to a task queued in the same process, and grants without a listing, on a
    // client of their own, so its snapshot is what the exporter must show for `batch`.
    let batches = client(&zk.connect_string()).await;
    let batch = batches.mutex("batch:1").unwrap().with_template("batch:{n}");
    let first = batch.acquire().await.unwrap();
    let queued = support::queue_in_process(&batch);
    drop(first);
    queued.await.unwrap().unwrap().release().await.unwrap();
    let batch_counts = batches.metrics();
    assert_eq!(batch_counts.handed_off, 1);
    assert!(batch_counts.granted_without_listing >= 1, "{batch_counts:?}");

    // A hold lost with its connection, then released.
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let cut = support::client_with(&proxy.connect_string(), std::time::Duration::from_secs(4)).await;
    let ledger = cut
        .mutex("ledger")
        .unwrap()
        .with_template("ledger")
        .acquire()
        .await
        .unwrap();
    proxy.blackhole();
    tokio::time::timeout(std::time::Duration::from_secs(20), ledger.lost())
        .await
        .expect("loss reported");
    assert!(matches!(ledger.release().await, Err(LockError::Lost { .. })));

    // Re-entries of one hold under two sets of labels: the writer's own (twice) and a
    // reader's (a writer may read), in between. Each is counted under its own labels.
    let ledgers = client(&zk.connect_string()).await;
    let write = ledgers.write_lock("ledger:7").unwrap().with_template("ledger:{id}");
    let read = ledgers.read_lock("ledger:7").unwrap().with_template("ledger:{id}");
    let outer = write.acquire().await.unwrap();
    outer
        .scope(async {
            for lock in [&write, &read, &write] {
                let inner = lock.acquire().await.unwrap();
                assert_eq!(inner.fencing_token(), outer.fencing_token());
                inner.release().await.unwrap();
            }
        })
        .await;
    outer.release().await.unwrap();
    assert_eq!(ledgers.metrics().reentered, 3);

    let text = handle.render();
    eprintln!("{text}");
    let s = support::prometheus_samples(&text);
    let get = |key: &str| {
        s.get(key)
            .copied()
            .unwrap_or_else(|| panic!("no sample {key} in:\n{text}"))
    };
    let tpl = r#"kind="mutex",lock="inventory:{sku}""#;
    assert_eq!(get(&format!("zklock_acquired_total{{{tpl}}}")), 4.0);
    assert_eq!(get(&format!("zklock_reentered_total{{{tpl}}}")), 1.0);
    assert_eq!(get(&format!("zklock_timed_out_total{{{tpl}}}")), 1.0);
    assert_eq!(get(&format!("zklock_released_total{{{tpl}}}")), 4.0);
    assert_eq!(
        get(r#"zklock_max_hold_exceeded_total{kind="mutex",lock="report"}"#),
        1.0
    );
    assert_eq!(get(r#"zklock_reentered_total{kind="write",lock="ledger:{id}"}"#), 2.0);
    assert_eq!(get(r#"zklock_reentered_total{kind="read",lock="ledger:{id}"}"#), 1.0);
    // The other client's lock has no template.
    assert_eq!(get(r#"zklock_acquired_total{kind="mutex",lock="-"}"#), 1.0);
    // Wait and hold times, as summaries with counts.
    assert_eq!(get(&format!("zklock_wait_seconds_count{{{tpl}}}")), 4.0);
    assert_eq!(get(&format!("zklock_hold_seconds_count{{{tpl}}}")), 4.0);
    assert!(get(r#"zklock_hold_seconds_sum{kind="mutex",lock="report"}"#) >= 0.1);
    let batch = r#"kind="mutex",lock="batch:{n}""#;
    assert_eq!(get(&format!("zklock_handed_off_total{{{batch}}}")), 1.0);
    assert_eq!(
        get(&format!("zklock_granted_without_listing_total{{{batch}}}")),
        batch_counts.granted_without_listing as f64
    );
    assert_eq!(
        get(&format!("zklock_acquired_total{{{batch}}}")),
        batch_counts.acquired as f64
    );
    assert_eq!(get(r#"zklock_lost_total{kind="mutex",lock="ledger"}"#), 1.0);
    assert_eq!(cut.metrics().lost, 1);
    // Never a filled-in name: the number of series does not grow with the keys.
    assert!(!text.contains("inventory:1") && !text.contains("inventory:3"), "{text}");
}
