#!/usr/bin/env bash
# Runs every test of the workspace against real ZooKeeper servers, then checks that the suite left
# no ZooKeeper JVM behind. Extra arguments are passed to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

server_pids() {
    pgrep -f 'org\.apache\.zookeeper\.server\.(ZooKeeperServerMain|quorum\.QuorumPeerMain)' | sort || true
}

before="$(server_pids)"

# Tests start JVMs; on a 2-core machine more parallel tests only add contention.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

locked=()
if [[ -f Cargo.lock ]]; then
    locked=(--locked)
fi

status=0
cargo test --workspace --all-features "${locked[@]}" "$@" || status=$?

# Servers are killed by Drop guards (and by the kernel when a test process dies); give the kernel
# a moment to reap them before looking.
survivors=""
for _ in $(seq 1 50); do
    survivors="$(comm -13 <(printf '%s\n' "$before") <(server_pids) | sed '/^$/d')"
    [[ -z "$survivors" ]] && break
    sleep 0.2
done
if [[ -n "$survivors" ]]; then
    echo "test.sh: FAIL: ZooKeeper JVMs started during the test run are still alive:" >&2
    for pid in $survivors; do
        ps -o pid=,args= -p "$pid" >&2 || true
    done
    exit 1
fi

if [[ $status -ne 0 ]]; then
    echo "test.sh: FAIL: cargo test exited with status $status" >&2
    exit "$status"
fi
echo "test.sh: all tests passed; no ZooKeeper JVM left behind."
