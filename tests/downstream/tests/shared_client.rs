//! A downstream test suite written the way users write one: many `#[tokio::test]`s, each on a
//! runtime of its own, sharing one client made once (which is also installed as the default
//! client, for `#[distributed_lock]` without `client = …`), against one ZooKeeper started once
//! for the whole test binary. The client must keep working after the runtime that made it has
//! ended, from every later runtime, whatever order the tests run in and however many at once.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::OnceCell;
use zklock::testing::ZkServer;
use zklock::LockClient;

static SERVER: OnceLock<ZkServer> = OnceLock::new();
static CLIENT: OnceCell<LockClient> = OnceCell::const_new();

/// The suite's one client, made by whichever test asks first, on that test's runtime.
async fn client() -> &'static LockClient {
    CLIENT
        .get_or_init(|| async {
            let server = SERVER.get_or_init(|| ZkServer::start().expect("start ZooKeeper"));
            let client = LockClient::connect(&server.connect_string()).await.expect("connect");
            client.install_default();
            client
        })
        .await
}

/// Takes and releases `name` twice through the shared client, and once through the default
/// client with the attribute.
async fn use_the_shared_client(n: u32) {
    let client = client().await;
    for _ in 0..2 {
        let guard = client
            .mutex(&format!("shared:{n}"))
            .unwrap()
            .acquire_timeout(Duration::from_secs(10))
            .await
            .expect("acquire through the shared client");
        guard.release().await.expect("release");
    }
    assert_eq!(zklock_downstream::locked_echo(n).await.expect("the attributed call"), n);
}

mod shared {
    use super::use_the_shared_client;

    #[tokio::test]
    async fn test_1() {
        use_the_shared_client(1).await;
    }

    #[tokio::test]
    async fn test_2() {
        use_the_shared_client(2).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_3() {
        use_the_shared_client(3).await;
    }

    #[tokio::test]
    async fn test_4_same_name_as_1() {
        use_the_shared_client(1).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn test_5_same_name_as_2() {
        use_the_shared_client(2).await;
    }

    #[tokio::test]
    async fn test_6() {
        use_the_shared_client(6).await;
    }

    /// Between uses no runtime runs at all: the session lives on its own thread meanwhile.
    #[test]
    fn test_7_with_no_runtime_in_between() {
        for round in 0..3 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(use_the_shared_client(7 + round));
            drop(runtime);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The suite above, run again in a process of its own, with one test at a time and with eight
/// at a time: every test must pass in both.
#[test]
fn the_shared_client_suite_passes_with_one_and_with_eight_test_threads() {
    let binary = std::env::current_exe().expect("the test binary's path");
    for threads in [1, 8] {
        // Seven short tests against one server: minutes mean a test hangs.
        let output = zklock::testing::process::output_within(
            std::process::Command::new(&binary).args(["shared::", &format!("--test-threads={threads}")]),
            std::time::Duration::from_secs(180),
        )
        .unwrap_or_else(|e| panic!("the suite with {threads} test threads did not finish: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("test result: ok. 7 passed"),
            "with {threads} test threads:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
