#!/usr/bin/env bash
# Makes (once) a Python virtual environment holding exactly the pinned packages given,
# and prints its python. The environment scripts (browser-venv.sh, photo-venv.sh) call it.
#
#   scripts/pinned-venv.sh VENV NAME==VERSION...
set -euo pipefail

die() {
	echo "pinned-venv: $*" >&2
	exit 1
}

[[ $# -ge 2 ]] || die "usage: pinned-venv.sh VENV NAME==VERSION..."
venv=$1
shift
packages=("$@")

installed() {
	"$venv/bin/python" - "${packages[@]}" <<'PY' 2>/dev/null || true
import importlib.metadata as m, sys
print(" ".join(f"{p.split('==')[0]}=={m.version(p.split('==')[0])}" for p in sys.argv[1:]))
PY
}

# Tests may ask at once; one of them makes the environment.
exec 9>"${TMPDIR:-/tmp}/pinned-venv-$(printf '%s' "$venv" | cksum | cut -d' ' -f1).lock"
flock 9 || die "cannot take the lock"
if [[ $(installed) != "${packages[*]}" ]]; then
	command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
	if [[ ! -x $venv/bin/pip ]]; then
		rm -rf "$venv"
		python3 -m venv "$venv" >&2 || die "cannot create $venv (Debian: apt-get install python3-venv)"
	fi
	echo "pinned-venv: installing ${packages[*]} from PyPI into $venv" >&2
	"$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}" >&2 ||
		die "cannot install ${packages[*]} from PyPI (is PyPI reachable?)"
	[[ $(installed) == "${packages[*]}" ]] || die "${packages[*]} did not install"
fi
echo "$venv/bin/python"
