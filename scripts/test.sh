#!/usr/bin/env bash
# Runs every test of the workspace against real ZooKeeper servers, then checks that the suite left
# no Java process (ZooKeeper servers, Curator peers) behind. Extra arguments are passed to
# `cargo test` (e.g. `--test testing_support` or a test name filter).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

# Every process the suite starts inherits this marker, so survivors can be told apart from
# JVMs that other programs on this machine run.
export ZKLOCK_TEST_RUN="test-sh-$$-$(date +%s%N)"

suite_java_pids() {
    # Scans /proc directly: minimal images may lack pgrep.
    local dir
    for dir in /proc/[0-9]*; do
        [[ "$(cat "$dir/comm" 2>/dev/null)" == java ]] || continue
        if tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qx "ZKLOCK_TEST_RUN=$ZKLOCK_TEST_RUN"; then
            echo "${dir#/proc/}"
        fi
    done
}

# Tests start JVMs; on a 2-core machine more parallel tests only add contention.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

locked=()
if [[ -f Cargo.lock ]]; then
    locked=(--locked)
fi

status=0
cargo test --workspace --all-features --no-fail-fast "${locked[@]}" "$@" || status=$?

# Servers are killed by Drop guards (and by the kernel when a test process dies); give the kernel
# a moment to reap them before looking.
survivors=""
for _ in $(seq 1 50); do
    survivors="$(suite_java_pids)"
    [[ -z "$survivors" ]] && break
    sleep 0.2
done
if [[ -n "$survivors" ]]; then
    echo "test.sh: FAIL: Java processes started by the test suite are still alive:" >&2
    for pid in $survivors; do
        echo "  $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-300)" >&2
    done
    echo "test.sh: killing them" >&2
    for pid in $survivors; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    exit 1
fi

if [[ $status -ne 0 ]]; then
    echo "test.sh: FAIL: cargo test exited with status $status" >&2
    exit "$status"
fi
echo "test.sh: all tests passed; no Java process of the suite left behind."
