#!/usr/bin/env bash
# Runs tinyperf's fuzz targets (fuzz/fuzz_targets/: every parser of input from outside)
# with libFuzzer through cargo-fuzz, coverage-guided, on stable Rust (no sanitizer), and
# prints a line per target: inputs run, seconds, coverage, corpus size and crashes.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [--jobs N] [TARGET...]
#   --seconds N  how long each target runs at most (default 10)
#   --runs N     how many inputs each target runs at most (default: no bound)
#   --jobs N     targets fuzzed at once (default 1)
#   TARGET       the targets to run (default: all, as `cargo fuzz list` names them)
#
# Each target starts from its seeds (fuzz/seeds/TARGET, and for the targets whose input
# the tests already hold, those test fixtures) and keeps what it learns in
# fuzz/corpus/TARGET (not in the repository). An input that panics,
# runs over 1 s (-timeout=1) or takes the process over 256 MB (-rss_limit_mb=256) is a
# crash: it is kept in fuzz/artifacts/TARGET/ and the script exits 1.
# Installs cargo-fuzz (pinned) with cargo when it is missing.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=10
runs=
jobs=1
targets=()
CARGO_FUZZ_VERSION=0.13.2

while [ $# -gt 0 ]; do
    case $1 in
        --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
        --runs) runs=${2:?--runs needs a number}; shift 2 ;;
        --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

cd "$repo/fuzz"
# The sanitizers need a nightly compiler; coverage guidance does not.
cargo fuzz build --sanitizer none >build.log 2>&1 || { tail -40 build.log >&2; exit 1; }
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/fuzz.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# The seed folders of a target: its own, and the test fixtures of its kind.
seeds_of() {
    [ -d "seeds/$1" ] && echo "seeds/$1"
    case $1 in
        kernel_log) echo ../tests/fixtures/kernel-logs ;;
        mllog) echo ../tests/fixtures/mlperf ;;
    esac
}

fuzz_one() {
    local target=$1
    local seeds
    mapfile -t seeds < <(seeds_of "$target")
    mkdir -p "corpus/$target" "artifacts/$target"
    local args=(-max_total_time="$seconds" -timeout=1 -rss_limit_mb=256 -print_final_stats=1)
    [ -n "$runs" ] && args+=(-runs="$runs")
    local started rc=0
    started=$(date +%s)
    cargo fuzz run --sanitizer none "$target" "corpus/$target" "${seeds[@]}" -- "${args[@]}" \
        >"$logs/$target.log" 2>&1 || rc=$?
    echo "$rc $(($(date +%s) - started))" >"$logs/$target.status"
}

running=0
for target in "${targets[@]}"; do
    [ -n "$(seeds_of "$target")" ] || { echo "fuzz: no seeds for $target (fuzz/seeds/$target)" >&2; exit 2; }
    fuzz_one "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

failed=0
printf '%-14s %12s %8s %8s %8s %8s  %s\n' target inputs seconds cov ft corpus result
for target in "${targets[@]}"; do
    log=$logs/$target.log
    read -r rc took <"$logs/$target.status"
    # libFuzzer's last status line: "#N DONE cov: C ft: F corp: K/..."
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    result=ok
    if [ "$rc" -ne 0 ]; then
        result="CRASH: $(grep -m1 -E 'panicked|ERROR: libFuzzer|Test unit written' "$log" || echo "exit $rc")"
        failed=1
        tail -30 "$log" >&2
    fi
    printf '%-14s %12s %8s %8s %8s %8s  %s\n' "$target" "${inputs:-?}" "$took" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
done
exit "$failed"
