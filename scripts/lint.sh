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
#                       incompatible_msrv lint (in test.sh's builds) then flags std APIs
#                       newer than it in our code
#   2. rustfmt          cargo fmt --all --check
#   3. rustdoc          the workspace's docs build with warnings as errors (broken links…)
#      public API       the published crates' public items and signatures match api/*.txt
#                       (scripts/api-snapshot.py; --update writes them after a deliberate change)
#   4. packaging        every publishable crate packages, and its packaged copy checks (every
#                       feature) against the other crates' packaged copies
# Clippy is not here: scripts/test.sh builds every target through clippy-driver (warnings are
# errors), with every feature and then with none and each alone, so the lints cost no compile of
# their own. `.ci/run` runs this before the test suite.
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

if ! cargo fmt --version >/dev/null 2>&1; then
    step "cargo fmt is missing; adding the rustfmt component"
    rustup component add rustfmt
fi

step "rustfmt"
cargo fmt --all --check

step "rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features "${locked[@]}"

step "public API (api/*.txt lists it; a change shows in review and needs --update)"
python3 scripts/api-snapshot.py

# zklock-examples, zklock-renamed-dependency and zklock-downstream are `publish = false`; every
# other member is packaged and its packaged copy checked against the others' packaged copies, so
# a file outside a crate's directory or a missing `include` fails here, not on publish.
step "cargo package"
allow_dirty=()
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
    allow_dirty=(--allow-dirty)
fi
# The packages are written without cargo's own verification, which builds each packaged crate in
# turn (with full code generation of its whole dependency graph, five times over: minutes).
# Their packaged copies are checked below instead, all at once and with every feature.
cargo package --workspace --exclude zklock-examples --exclude zklock-renamed-dependency --exclude zklock-downstream \
    --no-verify "${locked[@]}" "${allow_dirty[@]}"

# The packaged copies, unpacked side by side, form a workspace of their own in which each one's
# dependency on another zklock crate resolves to that one's packaged copy (not to the sources
# here, and not to crates.io). `cargo check` of every target a user builds (libraries and
# binaries), with every feature, finds a file left out of a package or a feature-gated module
# that does not compile as published; it shares the dependencies rustdoc already checked.
step "packaged copies check (every published crate as packaged, every feature)"
version="$(cargo metadata --format-version 1 --no-deps "${locked[@]}" |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "zklock"))')"
copies="${CARGO_TARGET_DIR:-target}/package/copies"
rm -rf -- "$copies"
mkdir -p -- "$copies"
members=()
patches=()
for crate in "${CARGO_TARGET_DIR:-target}"/package/zklock*-"$version".crate; do
    name="$(basename "$crate" "-$version.crate")"
    tar -xzf "$crate" -C "$copies"
    members+=("\"$name-$version\"")
    patches+=("$name = { path = \"$name-$version\" }")
done
{
    echo "[workspace]"
    echo "members = [$(IFS=,; echo "${members[*]}")]"
    echo "resolver = \"2\""
    echo "[patch.crates-io]"
    printf '%s\n' "${patches[@]}"
    # The same profiles as here: with other settings every dependency would be checked again
    # (and aws-lc-sys's C library built again) instead of reusing what rustdoc checked.
    awk '/^\[/ { keep = /^\[profile[.]/ } keep' Cargo.toml
} >"$copies/Cargo.toml"
# The repository's lock file pins the versions the checks above used; cargo only drops the
# entries of members that are not published.
cp Cargo.lock "$copies/Cargo.lock"
CARGO_TARGET_DIR="$(realpath "${CARGO_TARGET_DIR:-target}")" \
    cargo check --manifest-path "$copies/Cargo.toml" --workspace --all-features --lib --bins

step "all checks passed"
