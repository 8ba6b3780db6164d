#!/usr/bin/env bash
# Builds every target of the workspace with clippy's lints (warnings are errors), runs every test
# against real ZooKeeper servers (and PostgreSQL and Redis for the seckill example and its
# benchmark section), then checks that the suite left no server process (ZooKeeper servers,
# Curator peers, PostgreSQL and Redis servers) behind. Extra arguments are passed to
# `cargo nextest run` (e.g. `--test testing_support`, or a test name filter) and then only the
# tests they pick run: no doctests and no feature passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

# Every process the suite starts inherits this marker, so survivors can be told apart from
# JVMs and databases that other programs on this machine run.
export ZKLOCK_TEST_RUN="test-sh-$$-$(date +%s%N)"

suite_server_pids() {
    # Scans /proc directly: minimal images may lack pgrep.
    local dir
    for dir in /proc/[0-9]*; do
        case "$(cat "$dir/comm" 2>/dev/null)" in
            java | redis-server | prometheus)
                tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qx "ZKLOCK_TEST_RUN=$ZKLOCK_TEST_RUN" || continue
                ;;
            postgres)
                # The postmaster keeps its environment; its children overwrite theirs with their
                # process title, which names the cluster: zklock-testing/<marker>.
                tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qx "ZKLOCK_TEST_RUN=$ZKLOCK_TEST_RUN" ||
                    tr '\0' ' ' 2>/dev/null <"$dir/cmdline" | grep -qF "zklock-testing/$ZKLOCK_TEST_RUN" ||
                    continue
                ;;
            *) continue ;;
        esac
        echo "${dir#/proc/}"
    done
}

export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

locked=()
if [[ -f Cargo.lock ]]; then
    locked=(--locked)
fi

# Every build below is linted: with cargo's `build.rustc-workspace-wrapper`, clippy-driver
# compiles the workspace's own crates in rustc's place (as `cargo clippy` has it do for a check),
# with warnings as errors, so the lints come with the compile the tests need instead of a second,
# check-only compile of every dependency. Dependencies are compiled by rustc as usual.
# clippy-driver builds the same code (it adds lint passes and turns MIR optimisations off, as in
# any clippy run). The wrapper is a command-line setting, not the RUSTC_WORKSPACE_WRAPPER
# variable, so that the cargo runs of the tests themselves (trybuild's) compile with rustc.
clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [[ -z "$clippy_driver" ]]; then
    echo "test.sh: clippy-driver is missing; add it with: rustup component add clippy" >&2
    exit 1
fi
linted=(--config "build.rustc-workspace-wrapper=\"$clippy_driver\"")
# cargo-clippy's way of handing lint options to clippy-driver: each followed by this separator.
# Only clippy-driver reads it.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# cargo-nextest runs every test in a process of its own, several at a time across all test
# binaries (.config/nextest.toml says how many, which tests count double, and that a failure
# stops nothing: every test runs). Doctests are not nextest's: cargo test runs them after it.
status=0
cargo nextest run "${linted[@]}" --workspace --all-features "${locked[@]}" "$@" || status=$?

# The doctests, then each optional feature without the others, so code behind one `cfg` that
# only builds, lints clean or works in company is caught. Skipped when arguments pick tests.
if [[ $# -eq 0 ]]; then
    echo "test.sh: doctests" >&2
    # Some start JVMs; on a 2-core machine more doctests at a time only add contention.
    RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}" \
        cargo test "${linted[@]}" --workspace --all-features --doc "${locked[@]}" || status=$?
    feature_pass() {
        local features="$1"
        shift
        echo "test.sh: features: ${features:-none}" >&2
        cargo nextest run "${linted[@]}" --no-default-features ${features:+--features "$features"} \
            "${locked[@]}" "$@" || status=$?
    }
    # None, as a service that only takes locks builds it (the default): every target of the
    # library's three crates is built and linted, so a test or example missing its
    # `#[cfg(feature = …)]` fails here; the unit tests and the core lock tests run.
    feature_pass "" -p zklock-runtime -p zklock -p zklock-macros \
        -E '(kind(lib) & (package(zklock-runtime) | package(zklock))) | binary_id(zklock::lock_mutex) | binary_id(zklock::lock_reentrancy) | binary_id(zklock::macro_server)'
    # TLS without SASL, SASL without TLS (including the build that lacks TLS naming it).
    feature_pass tls -p zklock --test tls --test tls_certificates
    feature_pass sasl -p zklock --test sasl
    # Metrics alone: the lock events and gauges.
    feature_pass metrics -p zklock --test lock_metrics --test lock_gauges
    # The scheduler without metrics: its run statistics are kept without the metrics facade
    # (scheduler.rs reads them; the scheduler's logs and processes do not depend on metrics).
    feature_pass scheduler -p zklock --test scheduler
fi

# Servers are killed by Drop guards (and by the kernel when a test process dies); give the kernel
# a moment to reap them before looking.
survivors=""
for _ in $(seq 1 50); do
    survivors="$(suite_server_pids)"
    [[ -z "$survivors" ]] && break
    sleep 0.2
done
if [[ -n "$survivors" ]]; then
    echo "test.sh: FAIL: server processes started by the test suite are still alive:" >&2
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
echo "test.sh: all tests passed; no Java, PostgreSQL, Redis or Prometheus process of the suite left behind."
