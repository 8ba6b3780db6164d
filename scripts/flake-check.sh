#!/usr/bin/env bash
# Runs the whole test suite (scripts/test.sh) N times in a row and reports, per test, how many
# runs it failed in. A suite is only trustworthy when this prints no failures.
#
#   ./scripts/flake-check.sh 10            # ten runs
#   ./scripts/flake-check.sh 5 --load      # five runs, each beside one CPU-hungry process
#   ./scripts/flake-check.sh 5 --load 2    # ... beside two of them
#
# Extra arguments after `--` go to scripts/test.sh (and so to `cargo nextest run`).
# Logs: target/flake-check/run-<k>.log. Exit status: 0 when every run passed, 1 otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[[ $# -ge 1 && "$1" =~ ^[0-9]+$ && "$1" -ge 1 ]] || usage
runs=$1
shift
hogs=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --load)
            hogs=1
            if [[ "${2:-}" =~ ^[0-9]+$ ]]; then hogs=$2; shift; fi
            ;;
        --) shift; break ;;
        *) usage ;;
    esac
    shift
done

logs=target/flake-check
mkdir -p "$logs"
rm -f "$logs"/run-*.log

hog_pids=()
stop_hogs() {
    for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    hog_pids=()
}
trap stop_hogs EXIT

# Build once up front, as test.sh builds (through clippy-driver), so the first run is not the
# only one that compiles.
./scripts/test.sh --no-run >"$logs/build.log" 2>&1 || {
    echo "flake-check: the suite does not build; see $logs/build.log" >&2
    exit 1
}

for i in $(seq 1 "$hogs"); do
    bash -c 'while :; do :; done' &
    hog_pids+=($!)
done
[[ $hogs -gt 0 ]] && echo "flake-check: $hogs CPU-hungry process(es) running beside the suite"

green=0
started=$(date +%s)
for k in $(seq 1 "$runs"); do
    t0=$(date +%s)
    if ./scripts/test.sh "$@" >"$logs/run-$k.log" 2>&1; then
        verdict=green
        green=$((green + 1))
    else
        verdict=RED
    fi
    passed=$(grep -Eo '[0-9]+ passed' "$logs/run-$k.log" | awk '{s += $1} END {print s + 0}')
    echo "flake-check: run $k/$runs: $verdict ($passed tests passed, $(( $(date +%s) - t0 )) s)"
done
stop_hogs

echo
echo "flake-check: $green of $runs runs green (load: $hogs hog(s), $(( $(date +%s) - started )) s in all)"
# A failing test shows up as nextest's `FAIL [time] (k/n) binary test` (or TIMEOUT, SIGSEGV…),
# once as it fails and again in the summary: counted once per run. A doctest shows up as cargo
# test's `test <name> ... FAILED`.
failures=$(for log in "$logs"/run-*.log; do
    sed -nE 's/^ +[A-Z-]*(FAIL|TIMEOUT|SIG[A-Z]+|ABORT)[A-Z-]* \[[^]]*\] (\([^)]*\) )?(.+)$/\3/p; s/^test (.+) \.\.\. FAILED$/\1/p' "$log" | sort -u
done | sort | uniq -c | sort -rn)
if [[ -n "$failures" ]]; then
    echo "flake-check: failures per test (runs failed, test):"
    echo "$failures"
fi
[[ $green -eq $runs ]]
