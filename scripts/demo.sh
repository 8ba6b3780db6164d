#!/usr/bin/env bash
# Runs the demo: two clients contend for one ZooKeeper lock and print their fencing tokens.
# Starts its own ZooKeeper server unless `--zk HOST:PORT` is given. Arguments go to the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh >&2
exec cargo run --release --features testing --example hello_lock -- "$@"
