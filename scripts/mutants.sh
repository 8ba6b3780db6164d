#!/usr/bin/env bash
# Mutation testing (cargo-mutants) of the files that decide who holds what. Not part of CI: on a
# 2-core machine a full run takes hours (about a minute per mutant: a rebuild, then the tests
# that exercise the file, stopping at the first failure).
#
#   scripts/mutants.sh                 every group
#   scripts/mutants.sh rules holds     only these groups (see GROUPS below)
#
# Two runs can go side by side (a 2-core machine gains from it: the tests mostly wait on
# servers) with their own clone and target: ZKLOCK_MUTANTS_DIR=/tmp/m2
# ZKLOCK_MUTANTS_TARGET=/tmp/m2-target scripts/mutants.sh multi
#
# The mutants are applied in a clone of HEAD (ZKLOCK_MUTANTS_DIR, default /tmp/zklock-mutants),
# never in this checkout; the clone builds into this checkout's target directory (or
# ZKLOCK_MUTANTS_TARGET, to keep building here meanwhile), so only the workspace's own crates
# are rebuilt. Each group's results land in mutants.out/<group>/ here
# (caught.txt, missed.txt, timeout.txt, unviable.txt, outcomes.json). docs/testing.md lists the
# last results and why each surviving mutant cannot change behaviour.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "mutants.sh: cargo-mutants is missing: cargo install --locked cargo-mutants" >&2
    exit 1
fi
./scripts/install-deps.sh

# group: the package mutated | the files mutated | the tests run against each mutant (fastest
# first; `-p` names the package whose tests run).
declare -A PKG FILES TESTS
R=zklock-runtime/src
FILES[rules]="$R/engine/rules.rs $R/engine/alone.rs"
TESTS[rules]="-p zklock --lib --test lock_mutex --test lock_rw --test lock_alone --test interop_curator"
FILES[queue]="$R/engine/queue.rs"
TESTS[queue]="-p zklock --lib --test lock_mutex --test lock_rw --test lock_alone --test lock_errors --test lock_client --test lock_cancel --test lock_faults --test lock_lifecycle"
FILES[handoff]="$R/engine/local_queue.rs"
TESTS[handoff]="-p zklock --lib --test lock_mutex --test lock_reentrancy --test lock_lifecycle --test lock_cancel"
FILES[holds]="$R/engine/reentrancy.rs $R/engine/guard.rs"
TESTS[holds]="-p zklock --lib --test lock_reentrancy --test lock_mutex --test multi_guard --test lock_lifecycle --test macro_server --test never_falsely_held"
FILES[multi]="$R/recipes/multi.rs"
TESTS[multi]="-p zklock --lib --test multi_guard --test lock_multi --test never_falsely_held --test macro_server"
FILES[pulse]="$R/connection/pulse.rs"
TESTS[pulse]="-p zklock --lib"
FILES[jobs]="$R/scheduler/run.rs $R/scheduler/record.rs"
TESTS[jobs]="-p zklock --lib --test scheduler"
FILES[delay]="$R/engine/lock_delay.rs"
TESTS[delay]="-p zklock --lib --test lock_delay"
FILES[own]="$R/engine/own_node.rs $R/engine/loss.rs $R/engine/supervise.rs"
TESTS[own]="-p zklock --lib --test lock_revoke --test never_falsely_held --test session_moved --test lock_lifecycle"
PKG[exec]=zklock-cli
FILES[exec]="zklock-cli/src/exec/*.rs"
TESTS[exec]="-p zklock-cli --bins --test exec --test exec_group"
ORDER=(rules queue handoff holds multi pulse jobs delay own exec)

groups=("$@")
[[ ${#groups[@]} -eq 0 ]] && groups=("${ORDER[@]}")
for group in "${groups[@]}"; do
    [[ -n "${FILES[$group]:-}" ]] || { echo "mutants.sh: no group $group (${ORDER[*]})" >&2; exit 2; }
done

work="${ZKLOCK_MUTANTS_DIR:-/tmp/zklock-mutants}"
rm -rf "$work"
git clone --quiet "$root" "$work"
git -C "$work" checkout --quiet "$(git rev-parse HEAD)"
export CARGO_TARGET_DIR="${ZKLOCK_MUTANTS_TARGET:-$root/target}"

for group in "${groups[@]}"; do
    files=()
    for f in ${FILES[$group]}; do
        files+=(--file "$f")
    done
    out="$root/mutants.out/$group"
    rm -rf "$out"
    mkdir -p "$out"
    echo "mutants.sh: $group: ${FILES[$group]}" >&2
    # shellcheck disable=SC2086 # TESTS holds separate arguments
    (cd "$work" && cargo mutants --in-place --no-shuffle -p "${PKG[$group]:-zklock-runtime}" \
        --all-features "${files[@]}" --minimum-test-timeout 120 --output "$out" -- ${TESTS[$group]}) || true
    # cargo-mutants writes into <output>/mutants.out.
    for kind in caught missed timeout unviable; do
        count=$(wc -l <"$out/mutants.out/$kind.txt" 2>/dev/null || echo 0)
        echo "mutants.sh: $group: $kind $count" >&2
    done
done
