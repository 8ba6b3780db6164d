#!/usr/bin/env bash
# Runs the seckill (flash-sale) demo: a local ZooKeeper server (unless --zk is given), three
# inventory service processes sharing one SQLite file (or the PostgreSQL database named by
# DATABASE_URL), 2,000 concurrent requests (single buys and carts) for 3 items of 100 units,
# then a summary whose last line is one JSON object.
#
# Options are passed through to the demo:
#   --requests N        requests to send (default 2000)
#   --stock N           units of each item (default 100)
#   --items N           items on sale (default 3)
#   --cart-every N      every Nth request is a cart of 2-3 items (default 4; 0: none)
#   --instances N       service processes (default 3)
#   --concurrency N     requests in flight at once (default 64)
#   --unsafe-no-lock    run the service without the lock, to see the oversell it prevents
#   --zk HOST:PORT      use this ZooKeeper instead of starting one; then the demo needs only
#                       cargo and a C compiler, neither Java nor ZooKeeper, and no apt or root
#                       (--lock database|redis without a server named also needs PostgreSQL or
#                       Redis, which this does not install then)
#   --help              every option
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Installs only what is missing; quiet when all is there. Without --zk: everything
# install-deps.sh knows (the local ZooKeeper server needs its jars and a JDK). With --zk: only
# what building the example needs (a C compiler for the bundled SQLite and TLS code).
deps=()
for arg in "$@"; do
    case "$arg" in
        --zk | --zk=*) deps=(--build-only) ;;
    esac
done
./scripts/install-deps.sh ${deps[@]+"${deps[@]}"} >&2
exec cargo run --release -p zklock-examples --example seckill -- demo "$@"
