#!/usr/bin/env bash
# zklock's benchmark: zklock vs Apache Curator (InterProcessMutex, a Java peer on the Debian jars)
# vs the raw ZooKeeper floor, on one server in one run; then the seckill service under zklock,
# uncached and cached, routed at random and by item, PostgreSQL's advisory lock, a Redis lock
# and no lock (a conditional update).
#
#   ./scripts/bench.sh                  full run (about 22 minutes on 2 cores), results in bench-out/
#   ./scripts/bench.sh --quick          fewer cycles, shorter windows (about 4 minutes)
#   ./scripts/bench.sh --out DIR        where results.json and chart.svg go
#   ./scripts/bench.sh --zk HOST:PORT   measure an existing server instead of starting one
#                                       (the herd check needs 4lw.commands.whitelist=mntr,wchs,wchp)
#   ./scripts/bench.sh --fsync          start the server with forceSync=yes (default: no)
#   ./scripts/bench.sh --tick-ms N      tickTime of the server it starts (default 2000)
#   ./scripts/bench.sh --ensemble 3     three members on loopback, clients on a follower
#   ./scripts/bench.sh --seckill        only the seckill section (with --quick: about a minute and a half)
#   ./scripts/bench.sh --scale          only the scale curves: handoff against contenders, per-key
#                                       locking against keys, sessions per server (about 3 minutes)
#
# Prints a table, writes DIR/results.json (every figure, the server settings, the ratios, the
# targets), DIR/chart.svg (latency distributions, throughput against contenders),
# DIR/seckill.svg (the seckill section) and the scale curves' DIR/handoff.svg, DIR/keys.svg and
# DIR/sessions.svg.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

./scripts/install-deps.sh >&2
echo "building the bench (release)..." >&2
exec cargo run --quiet --release -p zklock-examples --example bench -- "$@"
