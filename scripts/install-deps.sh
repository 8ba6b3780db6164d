#!/usr/bin/env bash
# Installs what the tests and demos need, and only what is missing:
#   - Apache ZooKeeper 3.8 server jars   (Debian package `zookeeper`)
#   - Apache Curator jars                (Debian package `libcurator-recipes-java`)
#   - an SLF4J log backend for the server (Debian package `libslf4j-java`)
#   - a JDK compiler `javac`             (Debian package `openjdk-17-jdk-headless`)
#   - a C compiler for crates that build bundled C code (`gcc`, `libc6-dev`)
#   - PostgreSQL server binaries for the seckill tests (Debian package `postgresql`; it also
#     creates the `postgres` user the test servers run as when the tests run as root)
#   - a Redis server for the benchmark's Redis lock and its smoke test (Debian package
#     `redis-server`; the tests start their own servers, not the package's service)
#   - Prometheus: `promtool` for lint.sh's rule checks and rule unit tests, and the `prometheus`
#     server for the metrics end-to-end test (Debian package `prometheus`; the test starts its
#     own server, and a service the package started is stopped and disabled again)
#   - python3 for lint.sh's dashboard check (Debian package `python3`)
#   - cargo-nextest, the runner scripts/test.sh uses (from crates.io, by `cargo install`), and
#     clippy, which its builds run (a rustup component)
# Safe to run repeatedly: when everything is present it changes nothing and needs no network.
#
# With --build-only it looks only for what building the crates needs besides cargo: a C compiler
# (`gcc`, `libc6-dev`). That is what `scripts/demo.sh --zk HOST:PORT` needs: no ZooKeeper, Curator
# or JDK, and, where a C compiler is present (every Rust toolchain links with `cc`), no apt and no
# root.
# ZOOKEEPER_HOME pointing at an unpacked Apache ZooKeeper release (lib/*.jar) satisfies the server;
# PG_BINDIR naming a directory with initdb and postgres satisfies PostgreSQL; REDIS_SERVER naming a
# redis-server binary satisfies Redis.
set -euo pipefail

build_only=0
case "${1:-}" in
    "") ;;
    --build-only) build_only=1 ;;
    *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

missing=()
why=()

need() { # need <package> <reason>
    missing+=("$1")
    why+=("  $1  ($2)")
}

have_zookeeper_jars() {
    if [[ -n "${ZOOKEEPER_HOME:-}" ]] && compgen -G "${ZOOKEEPER_HOME}/lib/zookeeper-*.jar" >/dev/null; then
        return 0
    fi
    [[ -f /usr/share/java/zookeeper.jar ]]
}

have_postgresql() {
    if [[ -n "${PG_BINDIR:-}" ]]; then
        [[ -x "$PG_BINDIR/initdb" && -x "$PG_BINDIR/postgres" ]]
        return
    fi
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

have_redis() {
    if [[ -n "${REDIS_SERVER:-}" ]]; then
        [[ -x "$REDIS_SERVER" ]]
        return
    fi
    [[ -x /usr/bin/redis-server ]] || command -v redis-server >/dev/null 2>&1
}

have_prometheus() {
    command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1
}

if [[ $build_only -eq 0 ]]; then
    have_zookeeper_jars || need zookeeper "ZooKeeper server jars: /usr/share/java/zookeeper.jar"
    [[ -f /usr/share/java/curator-recipes.jar ]] || need libcurator-recipes-java "Curator jars: /usr/share/java/curator-recipes.jar"
    if [[ -z "${ZOOKEEPER_HOME:-}" ]]; then
        [[ -f /usr/share/java/slf4j-simple.jar ]] || need libslf4j-java "server log backend: /usr/share/java/slf4j-simple.jar"
    fi
    command -v javac >/dev/null 2>&1 || need openjdk-17-jdk-headless "JDK: javac (and java)"
fi
if ! command -v cc >/dev/null 2>&1; then
    need gcc "C compiler: cc"
    need libc6-dev "C library headers"
fi
if [[ $build_only -eq 0 ]]; then
    have_postgresql || need postgresql "PostgreSQL server: /usr/lib/postgresql/*/bin/initdb"
    have_redis || need redis-server "Redis server: /usr/bin/redis-server"
    have_prometheus || need prometheus "Prometheus: promtool and prometheus"
    command -v python3 >/dev/null 2>&1 || need python3 "python3: lint.sh's dashboard check"
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: no Rust toolchain (cargo) found; install one from https://rustup.rs and re-run." >&2
    toolchain_missing=1
else
    toolchain_missing=0
fi

# scripts/test.sh builds through clippy-driver (its builds are the lint run).
if [[ $build_only -eq 0 && $toolchain_missing -eq 0 ]] && ! cargo clippy --version >/dev/null 2>&1; then
    echo "install-deps: clippy missing; adding the rustup component"
    if ! rustup component add clippy; then
        echo "install-deps: clippy could not be added; scripts/test.sh needs it (rustup component add clippy)" >&2
        exit 1
    fi
fi

# scripts/test.sh runs the suite with cargo-nextest (every test in a process of its own, several
# at a time). Without it, it is built from crates.io: a few minutes, once, and no root needed.
if [[ $build_only -eq 0 && $toolchain_missing -eq 0 ]] && ! cargo nextest --version >/dev/null 2>&1; then
    echo "install-deps: cargo-nextest missing; building it from crates.io (cargo install --locked cargo-nextest)"
    if ! cargo install --locked cargo-nextest; then
        echo "install-deps: cargo-nextest could not be installed; scripts/test.sh needs it" >&2
        exit 1
    fi
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    if [[ $build_only -eq 1 ]]; then
        echo "install-deps: C compiler already present; nothing to install."
    else
        echo "install-deps: ZooKeeper, Curator, JDK, C compiler, PostgreSQL, Redis, Prometheus, python3 and cargo-nextest already present; nothing to install."
    fi
    exit "$toolchain_missing"
fi

echo "install-deps: missing:"
printf '%s\n' "${why[@]}"

sudo_cmd=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo_cmd=(sudo -n)
    else
        sudo_cmd=(unavailable)
    fi
fi

if [[ $build_only -eq 1 ]] && { ! command -v apt-get >/dev/null 2>&1 || [[ "${sudo_cmd[*]:-}" == unavailable ]]; }; then
    cat >&2 <<MSG
install-deps: cannot install automatically (this needs apt-get and root or password-less sudo).
Install a C compiler that answers to \`cc\` (on Debian or Ubuntu: sudo apt-get install
--no-install-recommends ${missing[*]}), then re-run.
MSG
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1 || [[ "${sudo_cmd[*]:-}" == unavailable ]]; then
    cat >&2 <<MSG
install-deps: cannot install automatically (this needs apt-get and root or password-less sudo).
Install these by hand, then re-run:

    sudo apt-get update
    sudo apt-get install --no-install-recommends ${missing[*]}

On a system without apt: install a JDK 17 (javac), unpack an Apache ZooKeeper 3.8 release and
export ZOOKEEPER_HOME=<its directory>, put the Apache Curator 5.x jars (curator-client,
curator-framework, curator-recipes) in /usr/share/java, and install PostgreSQL and export
PG_BINDIR=<the directory holding initdb and postgres>, install Redis and export
REDIS_SERVER=<the path of redis-server>, and put Prometheus's promtool and prometheus (2.x) and
python3 on the PATH.
MSG
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

# The package starts a Prometheus service of its own where an init system runs it (not in most
# containers). Nothing here uses it (the end-to-end test starts its own server): stop it and
# keep it from starting at boot.
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        "${sudo_cmd[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/prometheus ]] && command -v update-rc.d >/dev/null 2>&1; then
        "${sudo_cmd[@]}" /etc/init.d/prometheus stop >/dev/null 2>&1 || true
        "${sudo_cmd[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
fi

# Verify, so a partial install fails here rather than in the middle of the test suite.
failed=0
if [[ $build_only -eq 1 ]]; then
    command -v cc >/dev/null 2>&1 || { echo "install-deps: cc still missing" >&2; failed=1; }
else
    have_zookeeper_jars || { echo "install-deps: ZooKeeper jars still missing" >&2; failed=1; }
    [[ -f /usr/share/java/curator-recipes.jar ]] || { echo "install-deps: Curator jars still missing" >&2; failed=1; }
    command -v javac >/dev/null 2>&1 || { echo "install-deps: javac still missing" >&2; failed=1; }
    have_postgresql || { echo "install-deps: PostgreSQL (initdb) still missing" >&2; failed=1; }
    have_redis || { echo "install-deps: redis-server still missing" >&2; failed=1; }
    have_prometheus || { echo "install-deps: promtool or prometheus still missing" >&2; failed=1; }
    command -v python3 >/dev/null 2>&1 || { echo "install-deps: python3 still missing" >&2; failed=1; }
fi
if [[ $failed -ne 0 ]]; then
    exit 1
fi
echo "install-deps: installed ${missing[*]}"
exit "$toolchain_missing"
