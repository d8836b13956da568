#!/usr/bin/env bash
# ResNet training throughput and peak memory of tinyperf's CPU engine beside PyTorch on
# this machine, measured alternately (ours, PyTorch, ours, ...) so both see the same load.
# Prints img/s from the median step, the fastest step's img/s, peak RSS, and their ratios.
#
# Usage: scripts/bench-resnet.sh [rounds]   (default 2 rounds per model)
# Environment: PYTHON (a Python with torch and torchvision, default /tmp/torchvenv/bin/python),
#              THREADS (default 2), MODELS (default "resnet20 resnet50"), STEPS (5), WARMUP (2).
# Set up PyTorch once: python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch torchvision
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
python=${PYTHON:-/tmp/torchvenv/bin/python}
threads=${THREADS:-2}
models=${MODELS:-resnet20 resnet50}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
"$python" -c 'import torch, torchvision' 2>/dev/null || {
  echo "bench-resnet: $python cannot import torch and torchvision (see the usage at the top of $0)" >&2
  exit 1
}
cargo bench --quiet --bench resnet --no-run
results=$(mktemp)
trap 'rm -f "$results"' EXIT
common=(--steps "$steps" --warmup "$warmup" --threads "$threads")
for model in $models; do
  for round in $(seq "$rounds"); do
    echo "== $model round $round/$rounds: tinyperf, then PyTorch (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    cargo bench --quiet --bench resnet -- --model "$model" "${common[@]}" \
      | sed "s/^{/{\"round\":$round,/" | tee -a "$results"
    "$python" scripts/bench-torch.py --json --model "$model" "${common[@]}" \
      | sed "s/^{/{\"engine\":\"pytorch\",\"round\":$round,/" | tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print()
for model in dict.fromkeys(r["model"] for r in rows):
    ours = {r["round"]: r for r in rows if r["model"] == model and r["engine"] == "tinyperf"}
    torch = {r["round"]: r for r in rows if r["model"] == model and r["engine"] == "pytorch"}
    rounds = sorted(set(ours) & set(torch))
    if not rounds:
        continue
    o = statistics.median(ours[k]["img_per_s"] for k in rounds)
    t = statistics.median(torch[k]["img_per_s"] for k in rounds)
    ratios = [ours[k]["img_per_s"] / torch[k]["img_per_s"] for k in rounds]
    rss_o = max(ours[k]["peak_rss_bytes"] for k in rounds) / 2**20
    rss_t = max(torch[k]["peak_rss_bytes"] for k in rounds) / 2**20
    r0 = ours[rounds[0]]
    print(f"{model} batch {r0['batch']} {r0['image_size']}x{r0['image_size']} fp32, {r0['threads']} threads, "
          f"median of {r0['steps']} steps after {r0['warmup']} warm-up, {len(rounds)} alternating rounds:")
    print(f"  img/s     tinyperf {o:8.2f}   pytorch {t:8.2f}   ratio {o / t:.2f}x "
          f"(per round: {', '.join(f'{x:.2f}' for x in ratios)})")
    # The fastest step is the least disturbed by other work on a shared machine.
    bo = max(ours[k]["batch"] / (min(ours[k]["step_ms_all"]) / 1e3) for k in rounds)
    bt = max(torch[k]["batch"] / (min(torch[k]["step_ms_all"]) / 1e3) for k in rounds)
    print(f"  best step tinyperf {bo:8.2f}   pytorch {bt:8.2f}   ratio {bo / bt:.2f}x (img/s of the fastest step)")
    print(f"  peak RSS  tinyperf {rss_o:6.0f} MiB   pytorch {rss_t:6.0f} MiB   ratio {rss_o / rss_t:.2f}")
PY
