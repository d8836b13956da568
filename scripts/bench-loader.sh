#!/usr/bin/env bash
# Loader throughput against Pillow on the same JPEGs, one core each:
# decode + random resized crop + flip to 224x224.
#
# The images are generated 432x432 (the pixel count of ImageNet's typical 500x375),
# at JPEG quality 90, about 120 KB each like ImageNet's.
#
# Usage: scripts/bench-loader.sh [WORKDIR]   (env: IMAGES=1000 THREADS=<cores>)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-${TMPDIR:-/tmp}/tinyperf-bench-loader}
images=${IMAGES:-1000}
threads=${THREADS:-$(nproc)}
mkdir -p "$work"

cargo build --release --bin tinyperf >&2
tinyperf=target/release/tinyperf
data="$work/synth-432"
if [ ! -f "$data/synth.json" ]; then
    rm -rf "$data"
    "$tinyperf" dataset synth "$data" --classes 20 --per-class $(( (images + 19) / 20 )) \
        --val-per-class 1 --size 432 --quality 90 >&2
fi

venv="$work/pillow-venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet pillow >&2
fi

ours=$("$tinyperf" dataset bench --data "$data" --threads "$threads" --images "$images" --json)
pillow=$("$venv/bin/python" scripts/bench_loader_pillow.py "$data" --images "$images" --json)
python3 - "$ours" "$pillow" <<'PY'
import json, sys
ours, pillow = json.loads(sys.argv[1]), json.loads(sys.argv[2])
r, p = ours["img_per_s_per_core"], pillow["img_per_s_per_core"]
print(json.dumps({"tinyperf": ours, "pillow": pillow, "ratio_per_core": r / p}, indent=2))
print(f"tinyperf {r:.1f} img/s per core (decode alone {ours['decode_img_per_s_per_core']:.1f}), "
      f"Pillow {pillow['pillow']} {p:.1f} img/s per core: {r / p:.2f}x; "
      f"loader on {ours['threads']} threads {ours['loader_img_per_s']:.1f} img/s")
PY
