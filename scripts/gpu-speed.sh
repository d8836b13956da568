#!/usr/bin/env bash
# `make gpu-speed`: one call on a machine with a GPU. Builds (or takes BIN), checks the
# 16-bit paths for correctness (`tinyperf gpu check --quick`), then times ResNet-50
# training at batch 256 on 224² images in each configuration below, and PyTorch AMP
# (channels_last) on the same GPU, each under its own timeout so one hang cannot take the
# rest of the budget. Every variant's report lands in OUT_DIR; the table comes last.
#
# Usage: scripts/gpu-speed.sh [OUT_DIR]        (default out/gpu-speed)
# Environment: BIN (a tinyperf binary: no build), BATCH (256), STEPS (8), WARMUP (2),
#   VARIANT_TIMEOUT (45 s), CHECK_TIMEOUT (120 s), BUDGET (540 s for everything after the
#   build: a variant that would start past it is skipped), PYTHON (python3), TORCH=0 (no
#   PyTorch), ONLY="name ..." (run only these), DRY_RUN=1 (print the commands, run nothing).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/gpu-speed}
batch=${BATCH:-256}
steps=${STEPS:-8}
warmup=${WARMUP:-2}
variant_timeout=${VARIANT_TIMEOUT:-45}
check_timeout=${CHECK_TIMEOUT:-120}
budget=${BUDGET:-540}
python=${PYTHON:-python3}
dry=${DRY_RUN:-0}

# name | environment | precision. Conv, graph and fused-BN variants are in fp16, the
# precision the benchmark trains in.
variants=(
  "f32||fp32"
  "fp16||fp16"
  "bf16||bf16"
  "fp16-conv-dnn|TINYPERF_CONV=dnn|fp16"
  "fp16-conv-implicit|TINYPERF_CONV=implicit|fp16"
  "fp16-conv-im2col|TINYPERF_CONV=im2col|fp16"
  "fp16-graph|TINYPERF_GPU_GRAPH=1|fp16"
  "fp16-fused-bn|TINYPERF_FUSED_BN=1|fp16"
  "fp16-all-on|TINYPERF_FUSED_BN=1 TINYPERF_MULTI_TENSOR_OPT=1 TINYPERF_GPU_GRAPH=1|fp16"
)

run() { # name timeout command...: runs it with its output in OUT_DIR/name.log
  local name=$1 limit=$2; shift 2
  if [ "$dry" = 1 ]; then
    printf 'timeout %s' "$limit"; printf ' %q' "$@"; echo
    return 0
  fi
  local left=$(( budget - (SECONDS - started) ))
  if [ "$left" -lt 15 ]; then
    echo "== $name: skipped, the ${budget} s budget is spent"
    echo skipped >"$out/$name.rc"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit} s)"
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$rc" >"$out/$name.rc"
  tail -n 3 "$out/$name.log" | sed 's/^/   /'
  return 0
}

wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

mkdir -p "$out"
[ "$dry" = 1 ] || rm -f "$out"/*.rc "$out"/*.json "$out"/*.jsonl "$out"/*.log
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /opt/rocm/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
done
export TINYPERF_KERNEL_CACHE=${TINYPERF_KERNEL_CACHE:-$out/kernel-cache}

bin=${BIN:-}
if [ -z "$bin" ]; then
  bin=target/release/tinyperf
  # A machine without network builds from the crates already in cargo's cache.
  if [ "$dry" = 1 ]; then
    echo "cargo build --release --offline || cargo build --release"
  else
    cargo build --release --offline 2>"$out/build.log" || cargo build --release 2>>"$out/build.log" || {
      tail -n 20 "$out/build.log"; echo "gpu-speed: the build failed (BIN= takes a built binary)"; exit 1; }
  fi
fi

started=$SECONDS
names=()
if wanted check-16-bit; then
  names+=(check-16-bit)
  run check-16-bit "$check_timeout" "$bin" gpu check --quick --device 0 --json-out "$out/check-16-bit.json"
fi
for v in "${variants[@]}"; do
  IFS='|' read -r name vars precision <<<"$v"
  wanted "$name" || continue
  names+=("$name")
  # shellcheck disable=SC2086 # vars is a list of NAME=VALUE words
  run "$name" "$variant_timeout" env $vars "$bin" gpu check --throughput-only --device 0 \
    --precision "$precision" --batch "$batch" --steps "$steps" --warmup "$warmup" \
    --json-out "$out/$name.json"
done
if [ "${TORCH:-1}" != 0 ] && wanted torch-amp; then
  names+=(torch-amp)
  if [ "$dry" = 1 ] || "$python" -c 'import torch, torchvision, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    run torch-amp "$variant_timeout" "$python" scripts/bench-torch-gpu.py --batch "$batch" \
      --steps "$steps" --warmup "$warmup" --gemm 0
    [ "$dry" = 1 ] || grep '^{' "$out/torch-amp.log" >"$out/torch-amp.jsonl" || true
  else
    echo "PyTorch with GPU support not found: no PyTorch figures."
  fi
fi
[ "$dry" = 1 ] && exit 0

# The correctness check's verdict is its exit status; its report has no throughput.
echo
"$python" scripts/gpu_speed_table.py "$out" "${names[@]}"
