#!/usr/bin/env bash
# Longer fault-injection run of zklock (issues #8, #28): contender processes against a 3-member
# ensemble while the leader is killed, holders are partitioned and paused past their session
# timeout, the member a holder is connected to is cut off from the other members, a holder's
# client is closed under load, a multi-lock waiter is partitioned until its session expires,
# the holder is asked to release (revocation) and its node is deleted as an operator would
# (with the main lock's lock-delay, 1 s unless --lock-delay says otherwise), the whole ensemble
# restarts and the lock dir is reaped; then the recorded history is checked.
# Arguments go to the runner, e.g.:
#   ./scripts/chaos.sh --duration 10m
#   ./scripts/chaos.sh --duration 30m --processes 4 --tasks 3 --seed 42
# The summary and the final JSON line are also saved to target/chaos/latest.txt, the history to
# target/chaos/history.jsonl. Exit status: 0 pass, 1 safety violation, 2 the run failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

mkdir -p target/chaos
cargo build --release -p zklock-examples --example chaos
set +e
./target/release/examples/chaos run --history target/chaos/history.jsonl "$@" | tee target/chaos/latest.txt
status=${PIPESTATUS[0]}
set -e
exit "$status"
