#!/usr/bin/env bash
# Prints the folder holding NVIDIA's run-time compiler library (libnvrtc.so.12), from the
# nvidia-cuda-nvrtc-cu12 wheel on PyPI installed into a virtual environment on first use.
# NVRTC needs no GPU and no driver: with it, `tinyperf gpu compile` compiles the kernels
# on any machine, as the tests do.
#
#   scripts/nvrtc-lib.sh      prints the library folder (makes the environment first)
#
# The environment lives at $TINYPERF_NVRTC_VENV, else .venv-nvrtc in the repository root.
set -euo pipefail

NVRTC_VERSION=12.9.86

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TINYPERF_NVRTC_VENV:-$repo_root/.venv-nvrtc}
python_bin=${PYTHON:-python3}

die() {
	echo "nvrtc-lib: $*" >&2
	exit 1
}

[[ $# -eq 0 ]] || {
	sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

installed_version() {
	"$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nvidia-cuda-nvrtc-cu12"))' 2>/dev/null || true
}

library_dir() {
	"$venv/bin/python" -c 'import nvidia.cuda_nvrtc, os; print(os.path.join(nvidia.cuda_nvrtc.__path__[0], "lib"))'
}

# Tests call this in parallel; one of them makes the environment.
lock=${TMPDIR:-/tmp}/nvrtc-lib-$(printf '%s' "$venv" | cksum | cut -d' ' -f1).lock
exec 9>"$lock"
flock 9 || die "cannot lock $lock"
if [[ ! -x $venv/bin/python || $(installed_version) != "$NVRTC_VERSION" ]]; then
	command -v "$python_bin" >/dev/null || die "$python_bin not found: install python3 (Debian: apt-get install python3 python3-venv)"
	if [[ ! -x $venv/bin/pip ]]; then
		echo "nvrtc-lib: creating $venv" >&2
		rm -rf "$venv"
		"$python_bin" -m venv "$venv" >&2 ||
			die "cannot create a virtual environment at $venv (Debian: apt-get install python3-venv)"
	fi
	echo "nvrtc-lib: installing nvidia-cuda-nvrtc-cu12==$NVRTC_VERSION from PyPI" >&2
	"$venv/bin/pip" install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==$NVRTC_VERSION" >&2 ||
		die "cannot install nvidia-cuda-nvrtc-cu12==$NVRTC_VERSION from PyPI into $venv (is PyPI reachable?)"
fi
dir=$(library_dir) || die "nvidia-cuda-nvrtc-cu12 is not importable from $venv"
[[ -e $dir/libnvrtc.so.12 ]] || die "no libnvrtc.so.12 in $dir"
echo "$dir"
