//! Finding the ZooKeeper jars and a `java` binary, and running server JVMs that cannot outlive the
//! process that started them.

use std::env;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::class_sharing::ClassSharing;
use super::error::TestingError;

/// Where Debian's `zookeeper`/`libzookeeper-java` packages put the server jar. Its manifest
/// `Class-Path` pulls in netty, jute, slf4j-api and the rest.
const DEBIAN_ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// SLF4J backend that writes to stderr, which we send to the server's own log file.
const DEBIAN_SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// Netty jars the server jar's manifest leaves out but its Netty connection factory (the one
/// that serves TLS) and Netty client socket need: the TLS handler's codec base classes, the
/// resolver the transport loads, and the native transport's common classes. Debian's
/// `libnetty-java`, a dependency of `libzookeeper-java`.
pub(crate) const DEBIAN_NETTY_EXTRA_JARS: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// The class path of a ZooKeeper server: the installed jars and a log backend.
pub(crate) fn server_classpath() -> Result<String, TestingError> {
    server_classpath_from(
        env::var_os("ZOOKEEPER_HOME").as_deref(),
        Path::new(DEBIAN_ZOOKEEPER_JAR),
    )
}

/// [`server_classpath`] with the value of `ZOOKEEPER_HOME` and the place of Debian's server jar
/// given, so tests can try every case without touching the process environment.
///
/// A `ZOOKEEPER_HOME` that is set must hold the server jar: falling back to another
/// installation would run a server other than the one the user asked for.
pub(crate) fn server_classpath_from(zookeeper_home: Option<&OsStr>, debian_jar: &Path) -> Result<String, TestingError> {
    if let Some(home) = zookeeper_home.filter(|h| !h.is_empty()) {
        let home = PathBuf::from(home);
        let mut jars = jars_in(&home.join("lib"));
        // Release tarballs keep the server jar in lib/; source builds keep it at the top.
        jars.extend(
            jars_in(&home)
                .into_iter()
                .filter(|j| file_name(j).starts_with("zookeeper-")),
        );
        if !jars.iter().any(|j| file_name(j).starts_with("zookeeper-")) {
            return Err(TestingError::ZookeeperHomeWithoutJars {
                home: home.display().to_string(),
                looked_for: format!(
                    "{lib}/zookeeper-*.jar, {top}/zookeeper-*.jar",
                    lib = home.join("lib").display(),
                    top = home.display()
                ),
            });
        }
        let has_backend = jars.iter().any(|j| {
            let n = file_name(j);
            n.starts_with("logback-classic") || n.starts_with("slf4j-simple") || n.starts_with("slf4j-log4j")
        });
        if !has_backend && Path::new(DEBIAN_SLF4J_SIMPLE_JAR).is_file() {
            jars.push(PathBuf::from(DEBIAN_SLF4J_SIMPLE_JAR));
        }
        return Ok(join_classpath(&jars));
    }
    if debian_jar.is_file() {
        let mut jars = vec![debian_jar.to_path_buf()];
        jars.extend(
            [DEBIAN_SLF4J_SIMPLE_JAR]
                .iter()
                .chain(&DEBIAN_NETTY_EXTRA_JARS)
                .map(PathBuf::from)
                .filter(|jar| jar.is_file()),
        );
        return Ok(join_classpath(&jars));
    }
    Err(TestingError::ServerNotInstalled {
        searched: format!("{} (ZOOKEEPER_HOME is not set)", debian_jar.display()),
    })
}

fn jars_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut jars: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .collect();
    jars.sort();
    jars
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn join_classpath(jars: &[PathBuf]) -> String {
    jars.iter()
        .map(|j| j.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// The `java` launcher: `$JAVA_HOME/bin/java` when set, else `java` from `PATH`.
pub(crate) fn java_binary() -> Result<PathBuf, TestingError> {
    java_binary_from(env::var_os("JAVA_HOME").as_deref(), env::var_os("PATH").as_deref())
}

/// [`java_binary`] with the values of `JAVA_HOME` and `PATH` given, so tests can try every
/// case without touching the process environment.
pub(crate) fn java_binary_from(java_home: Option<&OsStr>, path: Option<&OsStr>) -> Result<PathBuf, TestingError> {
    let java_home = java_home.filter(|h| !h.is_empty());
    if let Some(home) = java_home {
        let java = PathBuf::from(home).join("bin/java");
        if java.is_file() {
            return Ok(java);
        }
        tracing::warn!(
            java_home = %Path::new(home).display(),
            "JAVA_HOME has no bin/java; looking for `java` on PATH instead"
        );
    }
    for dir in env::split_paths(path.unwrap_or_default()) {
        let java = dir.join("java");
        if java.is_file() {
            return Ok(java);
        }
    }
    Err(TestingError::JavaNotFound {
        java_home: match java_home {
            Some(home) => format!("set to {}, which has no bin/java", Path::new(home).display()),
            None => "not set".to_string(),
        },
        path: match path {
            Some(path) if !path.is_empty() => path.to_string_lossy().into_owned(),
            _ => "(not set)".to_string(),
        },
    })
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `command` so that the child is SIGKILLed by the kernel when this process dies, however
/// it dies.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process. Test
/// harnesses run each test on its own short-lived thread, and a server may be started on one
/// thread and used from others, so every fork happens on one thread that lives as long as the
/// process.
pub(crate) fn spawn_tied_to_process(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<SpawnRequest>>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("zklock-testing-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(spawn_with_death_signal(&mut command));
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let Some(spawner) = spawner else {
        return Err(io::Error::other("could not start the process-spawner thread"));
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("process-spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("process-spawner thread is gone"))?
}

fn spawn_with_death_signal(command: &mut Command) -> io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions
    // (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    command.spawn()
}

/// A running JVM. Killed (and reaped) on drop.
#[derive(Debug)]
pub(crate) struct JvmProcess {
    child: Child,
    paused: bool,
    class_sharing: ClassSharing,
}

impl JvmProcess {
    /// Starts `java <jvm_args> -cp <classpath> <main_class> <args>` with stdout and stderr
    /// appended to `log`, from a class-data-sharing archive of an earlier JVM of the same kind
    /// (class_sharing.rs).
    pub(crate) fn spawn(
        jvm_args: &[String],
        classpath: &str,
        main_class: &str,
        args: &[String],
        log: &Path,
        cwd: &Path,
    ) -> Result<JvmProcess, TestingError> {
        let java = java_binary()?;
        let class_sharing = ClassSharing::for_jvm(&java, classpath, main_class);
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| TestingError::io(format!("open log file {}", log.display()), e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| TestingError::io(format!("open log file {}", log.display()), e))?;
        let mut command = Command::new(&java);
        command
            .args(jvm_args)
            .args(class_sharing.jvm_args())
            .arg("-cp")
            .arg(classpath)
            .arg(main_class)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_err));
        let child = spawn_tied_to_process(command)
            .map_err(|e| TestingError::io(format!("spawn {} {main_class}", java.display()), e))?;
        Ok(JvmProcess {
            child,
            paused: false,
            class_sharing,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(description)` once the process has exited.
    pub(crate) fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        // SAFETY: plain syscall on a pid we own and have not reaped yet.
        if unsafe { libc::kill(self.child.id() as libc::pid_t, signal) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing. Returns once every thread
    /// of the process is seen stopped: the signal is delivered asynchronously, and a JVM thread
    /// still running for a moment could otherwise answer right after `pause` returned.
    pub(crate) fn pause(&mut self) -> Result<(), TestingError> {
        self.signal(libc::SIGSTOP)
            .map_err(|e| TestingError::io("SIGSTOP server", e))?;
        self.paused = true;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(self.child.id()) {
            if Instant::now() >= deadline {
                return Err(TestingError::io(
                    "SIGSTOP server",
                    io::Error::new(io::ErrorKind::TimedOut, "the process did not stop within 10 s"),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub(crate) fn resume(&mut self) -> Result<(), TestingError> {
        self.signal(libc::SIGCONT)
            .map_err(|e| TestingError::io("SIGCONT server", e))?;
        self.paused = false;
        Ok(())
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        self.reap();
    }

    /// Waits for the exit (at once when `exit_status` saw it already) and finishes the class
    /// archive this JVM may have written.
    fn reap(&mut self) {
        let status = self.child.wait();
        self.class_sharing.finish(&status);
    }

    /// SIGTERM, wait up to `grace` for a clean exit, then SIGKILL.
    pub(crate) fn terminate(&mut self, grace: Duration) {
        if self.exit_status().is_some() {
            self.reap();
            return;
        }
        let _ = self.signal(libc::SIGTERM);
        if self.paused {
            let _ = self.signal(libc::SIGCONT);
            self.paused = false;
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                self.reap();
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

impl Drop for JvmProcess {
    /// SIGKILL, except for the JVM that writes its kind's class archive: it gets a SIGTERM and
    /// a few seconds to write it (once per kind and machine).
    fn drop(&mut self) {
        if self.class_sharing.is_dumping() {
            self.terminate(Duration::from_secs(10));
        } else {
            self.kill();
        }
    }
}

/// The last `lines` lines of a log file (empty if it cannot be read).
pub(crate) fn tail_of_file(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 256 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(MAX_BYTES);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether every thread of process `pid` is stopped (state `T` or `t` in
/// `/proc/<pid>/task/<tid>/stat`). Where `/proc` cannot be read, there is nothing to wait for.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            return true; // the thread is gone
        };
        // `tid (comm) S …`: the state follows the last `)`, as comm may hold anything.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        matches!(state, Some('T' | 't') | None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zookeeper_home_without_server_jars_is_an_error_that_names_it() {
        let home = tempfile::tempdir().expect("temp dir");
        fs::create_dir(home.path().join("lib")).expect("lib/");
        fs::write(home.path().join("lib/slf4j-api-1.7.30.jar"), b"").expect("a jar that is not the server");
        // Even with a usable jar elsewhere: the user asked for this installation.
        let elsewhere = home.path().join("zookeeper.jar");
        fs::write(&elsewhere, b"").expect("fallback jar");

        let err = server_classpath_from(Some(home.path().as_os_str()), &elsewhere).expect_err("no server jar");
        assert!(matches!(err, TestingError::ZookeeperHomeWithoutJars { .. }), "{err:?}");
        let message = err.to_string();
        let shown = home.path().display().to_string();
        assert!(
            message.contains(&format!("ZOOKEEPER_HOME is set to {shown}")),
            "{message}"
        );
        assert!(message.contains(&format!("{shown}/lib/zookeeper-*.jar")), "{message}");
        assert!(message.contains("apt-get install zookeeper"), "{message}");
        assert!(!message.contains("install-deps"), "{message}");
    }

    #[test]
    fn a_zookeeper_home_with_a_release_layout_gives_its_jars() {
        let home = tempfile::tempdir().expect("temp dir");
        fs::create_dir(home.path().join("lib")).expect("lib/");
        for jar in [
            "zookeeper-3.8.4.jar",
            "zookeeper-jute-3.8.4.jar",
            "logback-classic-1.2.13.jar",
        ] {
            fs::write(home.path().join("lib").join(jar), b"").expect("jar");
        }
        let classpath = server_classpath_from(Some(home.path().as_os_str()), Path::new("/nonexistent/zookeeper.jar"))
            .expect("a server jar is there");
        assert!(classpath.contains("lib/zookeeper-3.8.4.jar"), "{classpath}");
        assert!(classpath.contains("lib/logback-classic-1.2.13.jar"), "{classpath}");
        assert!(
            !classpath.contains("slf4j-simple"),
            "a backend is there already: {classpath}"
        );
    }

    #[test]
    fn no_jars_anywhere_says_what_to_install() {
        let err = server_classpath_from(None, Path::new("/nonexistent/zookeeper.jar")).expect_err("nothing there");
        let message = err.to_string();
        assert!(message.contains("/nonexistent/zookeeper.jar"), "{message}");
        assert!(message.contains("ZOOKEEPER_HOME is not set"), "{message}");
        assert!(message.contains("apt-get install zookeeper"), "{message}");
        assert!(message.contains("set ZOOKEEPER_HOME"), "{message}");
        assert!(
            message.contains("In the zklock repository, scripts/install-deps.sh"),
            "{message}"
        );
        // An empty value counts as unset, as a shell's `ZOOKEEPER_HOME=` means.
        let empty = server_classpath_from(Some(OsStr::new("")), Path::new("/nonexistent/zookeeper.jar"));
        assert!(
            matches!(empty, Err(TestingError::ServerNotInstalled { .. })),
            "{empty:?}"
        );
    }

    #[test]
    fn java_not_found_names_the_variables_and_what_to_install() {
        let home = tempfile::tempdir().expect("temp dir");
        let bin = tempfile::tempdir().expect("temp dir");
        let path = bin.path().as_os_str();

        let err = java_binary_from(Some(home.path().as_os_str()), Some(path)).expect_err("no java anywhere");
        let message = err.to_string();
        assert!(
            message.contains(&format!(
                "JAVA_HOME is set to {}, which has no bin/java",
                home.path().display()
            )),
            "{message}"
        );
        assert!(message.contains(&format!("PATH={}", bin.path().display())), "{message}");
        assert!(message.contains("apt-get install default-jdk-headless"), "{message}");
        assert!(message.contains("set JAVA_HOME"), "{message}");

        let unset = java_binary_from(None, None).expect_err("no java anywhere").to_string();
        assert!(unset.contains("JAVA_HOME is not set"), "{unset}");
        assert!(unset.contains("PATH=(not set)"), "{unset}");
    }

    #[test]
    fn java_is_found_in_java_home_then_on_path() {
        let home = tempfile::tempdir().expect("temp dir");
        fs::create_dir(home.path().join("bin")).expect("bin/");
        fs::write(home.path().join("bin/java"), b"").expect("java");
        let bin = tempfile::tempdir().expect("temp dir");
        fs::write(bin.path().join("java"), b"").expect("java");

        let found = java_binary_from(Some(home.path().as_os_str()), Some(bin.path().as_os_str())).expect("java");
        assert_eq!(found, home.path().join("bin/java"));
        let found = java_binary_from(None, Some(bin.path().as_os_str())).expect("java");
        assert_eq!(found, bin.path().join("java"));
    }
}
