//! `PgServer` against the installed PostgreSQL: it serves SQL, keeps databases apart, and leaves
//! no process behind, neither when dropped nor when the test process is killed.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use zklock_testing::{PgServer, TestingError};

/// The pids of the live (not zombie) children of `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                return false;
            };
            // `pid (comm) state ppid …`; comm may hold anything, so split after the last `)`.
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = fields.next();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            ppid == Some(pid) && state != Some("Z")
        })
        .collect()
}

/// Whether process `pid` exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Waits up to `within` until none of `pids` is alive; returns the survivors.
fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| is_alive(p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_serves_sql_keeps_databases_apart_and_is_gone_after_drop() {
    let server = PgServer::start().expect("PostgreSQL");
    assert_eq!(
        server.url(),
        format!("postgres://zklock@127.0.0.1:{}/postgres", server.port())
    );
    TcpStream::connect(server.addr()).expect("the server listens on its port");
    assert_eq!(server.psql("postgres", "select 1").expect("select 1"), "1");
    assert_eq!(
        server.psql("postgres", "select current_user").expect("whoami"),
        server.user()
    );

    // Two databases, one table name, separate rows.
    let shop = server.create_database("shop").expect("create shop");
    assert_eq!(shop, server.database_url("shop"));
    server.create_database("stock_2").expect("create stock_2");
    server
        .psql("shop", "create table t (n int); insert into t values (1), (2)")
        .expect("fill shop");
    server
        .psql("stock_2", "create table t (n int); insert into t values (3)")
        .expect("fill stock_2");
    assert_eq!(server.psql("shop", "select n from t order by n").expect("read"), "1\n2");
    assert_eq!(server.psql("stock_2", "select n from t").expect("read"), "3");

    // Errors carry psql's message; names that would need quoting are refused before SQL.
    match server.create_database("shop") {
        Err(TestingError::CommandFailed { output, .. }) => assert!(output.contains("already exists"), "{output}"),
        other => panic!("a second `shop` was created: {other:?}"),
    }
    assert!(matches!(
        server.create_database("x\"; drop database shop; --"),
        Err(TestingError::InvalidArgument(_))
    ));
    assert!(matches!(
        server.create_database("9lives"),
        Err(TestingError::InvalidArgument(_))
    ));
    match server.psql("shop", "select * from missing") {
        Err(TestingError::CommandFailed { output, .. }) => assert!(output.contains("missing"), "{output}"),
        other => panic!("a query of a missing table passed: {other:?}"),
    }

    // The postmaster and its children, among them the backend of a session in a long query,
    // end with the handle.
    let pid = server.pid().expect("running");
    let mut session = std::process::Command::new(server.bin_dir().join("psql"))
        .args([
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "-U",
            server.user(),
        ])
        .args(["-d", "shop", "-c", "select pg_sleep(600)"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a psql session");
    let deadline = Instant::now() + Duration::from_secs(10);
    let backend: u32 = loop {
        let found = server
            .psql(
                "postgres",
                "select pid from pg_stat_activity where query = 'select pg_sleep(600)'",
            )
            .expect("pg_stat_activity");
        if let Ok(backend) = found.trim().parse() {
            break backend;
        }
        assert!(Instant::now() < deadline, "the session's backend did not appear");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        children_of(pid).contains(&backend),
        "backend {backend} is not the postmaster's child"
    );
    let mut processes = children_of(pid);
    processes.push(pid);
    let dir = server.dir().to_path_buf();
    assert!(dir.join("data/PG_VERSION").is_file());
    assert!(server.log_tail(20).contains("ready to accept connections"));
    drop(server);
    assert_eq!(
        wait_gone(&processes, Duration::from_secs(5)),
        Vec::<u32>::new(),
        "server processes outlived the handle"
    );
    let _ = session.kill();
    let _ = session.wait();
    assert!(!dir.exists() || std::env::var_os("ZKLOCK_TESTING_KEEP_DIRS").is_some());
}

#[test]
fn a_stopped_server_refuses_connections() {
    let server = PgServer::builder()
        .config("max_connections", "20")
        .start()
        .expect("PostgreSQL");
    assert_eq!(server.psql("postgres", "show max_connections").expect("show"), "20");
    let pid = server.pid().expect("running");
    server.stop();
    assert!(!server.is_running());
    assert!(wait_gone(&[pid], Duration::from_secs(5)).is_empty());
    assert!(TcpStream::connect(server.addr()).is_err(), "still listening");
    assert!(server.psql("postgres", "select 1").is_err());
    server.stop(); // again: nothing to do
}

#[test]
fn missing_binaries_say_how_to_install_them() {
    let err = PgServer::builder()
        .bin_dir("/nonexistent/postgresql/bin")
        .start()
        .expect_err("no binaries there");
    assert!(matches!(err, TestingError::PostgresNotInstalled { .. }), "{err:?}");
    assert!(err.to_string().contains("scripts/install-deps.sh"), "{err}");
}

const HOLDER_ENV: &str = "PG_TEST_HOLD_SERVER";
const READY: &str = "PG_SERVER_PID ";

/// Not a test: started by `the_server_dies_with_the_test_process`, it starts a server, prints
/// the postmaster's pid and directory, and waits to be killed.
#[test]
#[ignore = "entry point of the child process of another test"]
fn hold_a_server_until_killed() {
    // Run alone (`--include-ignored`), it fails instead of passing without doing anything.
    assert!(
        std::env::var_os(HOLDER_ENV).is_some(),
        "the child process of another test: run that test, not this"
    );
    let server = PgServer::start().expect("PostgreSQL");
    println!("{READY}{} {}", server.pid().expect("running"), server.dir().display());
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn the_server_dies_with_the_test_process() {
    let mut child = zklock_testing::process::rerun_test("hold_a_server_until_killed")
        .expect("test binary")
        .env(HOLDER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    let stdout = child.stdout.take().expect("stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.find(READY).map(|at| line[at + READY.len()..].to_string()))
        .expect("the holder reports its server");
    let (pid, dir) = line.split_once(' ').expect("pid and directory");
    let pid: u32 = pid.parse().expect("pid");
    let mut processes = children_of(pid);
    processes.push(pid);

    child.kill().expect("SIGKILL the holder");
    let _ = child.wait();
    assert_eq!(
        wait_gone(&processes, Duration::from_secs(10)),
        Vec::<u32>::new(),
        "server processes outlived the killed test process"
    );
    // Nothing ran the holder's destructors: its directory stays, so remove it here.
    let _ = std::fs::remove_dir_all(Path::new(dir));
}
