#!/usr/bin/env bash
# The checks a reviewer runs before reading a change, in the order that fails fastest:
#   1. observability    the Prometheus rules check and pass their unit tests (promtool), the
#                       example Prometheus configuration checks, and the Grafana dashboard is
#                       valid JSON whose expressions parse and use only documented metric names
#                       (scripts/check-observability.py)
#      doc commands     every ./scripts and cargo command line in README.md and docs/ names a
#                       script, flag, package, target and feature that exist
#                       (scripts/check-doc-commands.py)
#      msrv             every package of Cargo.lock a published crate builds with (normal and
#                       build dependencies, every feature, this platform) declares a
#                       rust-version no newer than ours (scripts/check-msrv.py); clippy's
#                       incompatible_msrv lint then flags std APIs newer than it in our code
#   2. rustfmt          cargo fmt --all --check
#   3. clippy           every crate, every target, every feature, warnings are errors; the
#                       library again with no feature (every target) and with each feature
#                       alone (the library itself)
#   4. rustdoc          the workspace's docs build with warnings as errors (broken links…)
#      public API       the published crates' public items and signatures match api/*.txt
#                       (scripts/api-snapshot.py; --update writes them after a deliberate change)
#   5. packaging        every publishable crate packages and its packaged copy builds
# `.ci/run` runs this before the test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

locked=()
if [[ -f Cargo.lock ]]; then
    locked=(--locked)
fi

step() { echo "lint.sh: $*" >&2; }

step "observability (rules, rule tests, dashboard)"
for tool in promtool python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "lint.sh: $tool is missing; run scripts/install-deps.sh (it installs Prometheus's promtool and python3)" >&2
        exit 1
    fi
done
promtool check rules observability/rules.yml
promtool check config observability/prometheus.yml
(cd observability && promtool test rules tests/*.yml)
python3 scripts/check-observability.py

step "documented commands (every ./scripts and cargo line of README.md and docs/ works as written)"
python3 scripts/check-doc-commands.py

step "MSRV (every locked package the published crates build with allows our rust-version)"
python3 scripts/check-msrv.py

for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        step "cargo $tool is missing; adding the rustfmt and clippy components"
        rustup component add rustfmt clippy
        break
    fi
done

step "rustfmt"
cargo fmt --all --check

step "clippy"
cargo clippy --workspace --all-targets --all-features "${locked[@]}" -- -D warnings

# The library with no optional feature (its default): every target builds and lints clean, so a
# test or example missing its `#[cfg(feature = …)]` shows here. Then the library alone with each
# feature by itself.
step "clippy, library without features"
cargo clippy -p zklock -p zklock-runtime -p zklock-macros --no-default-features --all-targets "${locked[@]}" \
    -- -D warnings
for feature in tls sasl metrics scheduler; do
    step "clippy, library with only $feature"
    cargo clippy -p zklock -p zklock-runtime --no-default-features --features "$feature" --lib "${locked[@]}" \
        -- -D warnings
done

step "rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features "${locked[@]}"

# zklock-examples, zklock-renamed-dependency and zklock-downstream are `publish = false`; every other member is packaged and its packaged copy
# built against the others' packaged copies (a local registry overlay), so a file outside a
# crate's directory or a missing `include` fails here, not on publish.
step "public API (api/*.txt lists it; a change shows in review and needs --update)"
python3 scripts/api-snapshot.py

step "cargo package"
allow_dirty=()
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
    allow_dirty=(--allow-dirty)
fi
# Cargo unpacks the overlay's crates into its registry cache once per name and version and
# reuses that copy afterwards, so a later run would build against the sources of the first one.
# Drop those copies (the overlay's directories are the ones not named after a real index).
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
for copy in "$cargo_home"/registry/src/*/zklock*-[0-9]*; do
    case "$copy" in
        "$cargo_home"/registry/src/index.*) ;;
        *) [[ -d "$copy" ]] && rm -rf -- "$copy" ;;
    esac
done
# Their verify builds are registry sources of an unchanged name and version, which cargo never
# rebuilds once built: drop the build fingerprints of zklock's crates, so a local run does not
# link against an earlier run's artifacts (a fresh checkout has none).
rm -rf -- "${CARGO_TARGET_DIR:-target}"/debug/.fingerprint/zklock*
cargo package --workspace --exclude zklock-examples --exclude zklock-renamed-dependency --exclude zklock-downstream "${locked[@]}" "${allow_dirty[@]}"

step "all checks passed"
