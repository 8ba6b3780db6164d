//! Waiting for a request to stop, the way the example programs stop cleanly (closing their
//! lock clients, so their ZooKeeper sessions end at once instead of at their timeout).

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn stop_requested() {
    let terminated = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}
