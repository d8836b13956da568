#!/usr/bin/env bash
# CPU GEMM figures: the cpu-gemm stage, repeated, beside the CPU's theoretical peak.
# Usage: scripts/bench-gemm.sh [path/to/tinyperf] [repeats]
set -euo pipefail
bin=${1:-target/release/tinyperf}
repeats=${2:-3}
command -v python3 >/dev/null || { echo "bench-gemm: python3 is needed to read the results" >&2; exit 1; }
for size in 1024 2048; do
  for i in $(seq "$repeats"); do
    "$bin" run acceptance --events jsonl -o gemm_size=$size -o gemm_seconds=3 -o gemm_min_fraction=0 \
      | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e.get("event") == "stage_finished" and e["result"]["name"] == "cpu-gemm":
        m = {x["name"]: x["value"] for x in e["result"]["metrics"]}
        print("cpu-gemm n=%d threads=%d sustained=%.1f GFLOP/s best=%.1f GFLOP/s peak=%.1f GFLOP/s ratio=%.2f"
              % (m["matrix_size"], m["threads"], m["gflops_sustained"], m["gflops_best"],
                 m.get("gflops_peak", float("nan")), m.get("fraction_of_peak", float("nan"))))
'
  done
done
