#!/usr/bin/env bash
# `make gpu-check`: on a machine with an NVIDIA or AMD GPU, checks every kernel and one
# training step of the GPU backend against the CPU backend, then measures GEMM TFLOPS
# and ResNet-50 training throughput, and, when PyTorch with GPU support is installed,
# PyTorch's figures on the same GPU in the same run.
#
# Usage: scripts/gpu-check.sh [TINYPERF_BINARY] [OUT_DIR]
# Environment: BATCH (256), STEPS (10), WARMUP (3), GEMM (8192), PYTHON (python3),
#              TORCH=0 to skip the PyTorch figures, PROFILE=1 to time every kernel of a step.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/tinyperf}
out=${2:-out/gpu-check}
mkdir -p "$out"
# The toolkits' usual library folders, for NVRTC/cuBLAS and hiprtc/rocBLAS when the
# loader's configuration does not name them.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /opt/rocm/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
done
export TINYPERF_KERNEL_CACHE=${TINYPERF_KERNEL_CACHE:-$out/kernel-cache}
status=0
timeout 540 "$bin" gpu check --batch "${BATCH:-256}" --steps "${STEPS:-10}" \
  --warmup "${WARMUP:-3}" --gemm-size "${GEMM:-8192}" --json-out "$out/gpu-check.json" \
  $([ "${PROFILE:-0}" = 1 ] && echo --profile) \
  | tee "$out/gpu-check.txt" || status=$?
python=${PYTHON:-python3}
if [ "${TORCH:-1}" != 0 ] && "$python" -c 'import torch, torchvision, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo; echo "PyTorch on the same GPU:"
  timeout 300 "$python" scripts/bench-torch-gpu.py --batch "${BATCH:-256}" --steps "${STEPS:-10}" \
    --warmup "${WARMUP:-3}" --gemm "${GEMM:-8192}" | tee "$out/torch.jsonl" || true
else
  echo; echo "PyTorch with GPU support not found: no PyTorch figures."
fi
exit "$status"
