//! What the engine logs, captured from a real run: nothing per acquire or release at INFO (a
//! service taking a thousand locks a second must not flood its logs), the per-acquire events
//! at DEBUG inside a span that names the lock, and a session timeout cut by the server reported
//! once at WARN with both values. One test: the subscriber is global to this binary.

mod support;

use std::time::Duration;

use support::Captured;
use zklock_runtime::LockClient;

fn at(level: &str, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.contains(&format!(" {level} ")))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_line_per_cycle_at_info_and_a_cut_session_timeout_is_said_once() {
    let captured = Captured::install();

    // A 200 ms tick allows sessions of at most 4 s: asking for 60 s is cut.
    let zk = support::server();
    let client = LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let lock = client.mutex("logs-cycle").unwrap();
    const CYCLES: usize = 300;
    for n in 0..CYCLES {
        let guard = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
        if n % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
        }
    }
    client.flush().await;
    client.close().await;

    let lines = captured.lines();
    // The engine's own INFO lines are session events: opened, connected, closing. (The client
    // library adds a few of its own per session.)
    let info = at("INFO", &lines);
    let ours: Vec<_> = info.iter().filter(|l| l.contains("zklock_runtime")).collect();
    assert!(
        ours.len() <= 3 && info.len() <= 8,
        "{} INFO lines over {CYCLES} cycles (session events only expected):\n{}",
        info.len(),
        info.join("\n")
    );
    assert!(
        ours.iter().all(|l| l.contains("session") || l.contains("closing")),
        "{ours:#?}"
    );
    let acquired: Vec<_> = at("DEBUG", &lines)
        .into_iter()
        .filter(|l| l.contains("lock acquired"))
        .collect();
    assert_eq!(acquired.len(), CYCLES, "one DEBUG event per acquisition");
    assert!(
        acquired.iter().all(|l| l.contains("acquire{lock=logs-cycle")),
        "an acquire event outside the span naming its lock: {}",
        acquired[0]
    );
    let cut: Vec<_> = at("WARN", &lines)
        .into_iter()
        .filter(|l| l.contains("shorter session timeout"))
        .collect();
    assert_eq!(cut.len(), 1, "{cut:#?}");
    assert!(
        cut[0].contains("asked=60s") && cut[0].contains("granted=4s"),
        "{}",
        cut[0]
    );
}
