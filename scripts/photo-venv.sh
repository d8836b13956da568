#!/usr/bin/env bash
# Makes (once) the virtual environment that writes the real image sets of the smoke
# tests (scripts/photo_sets.py), and prints its python. scikit-learn ships the
# handwritten digits and two photographs, scikit-image its sample photographs, Pillow
# writes the JPEGs.
#
#   scripts/photo-venv.sh        prints the environment's python (makes it first)
#
# The environment lives at $TINYPERF_PHOTO_VENV, else .venv-photo in the repository root.
set -euo pipefail

PACKAGES=(scikit-learn==1.9.1 scikit-image==0.26.0 pillow==13.0.0)
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TINYPERF_PHOTO_VENV:-$repo_root/.venv-photo}

die() {
	echo "photo-venv: $*" >&2
	exit 1
}

installed() {
	"$venv/bin/python" - "${PACKAGES[@]}" <<'PY' 2>/dev/null || true
import importlib.metadata as m, sys
print(" ".join(f"{p.split('==')[0]}=={m.version(p.split('==')[0])}" for p in sys.argv[1:]))
PY
}

# Tests may ask at once; one of them makes the environment.
exec 9>"${TMPDIR:-/tmp}/photo-venv-$(printf '%s' "$venv" | cksum | cut -d' ' -f1).lock"
flock 9 || die "cannot take the lock"
if [[ $(installed) != "${PACKAGES[*]}" ]]; then
	command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
	if [[ ! -x $venv/bin/pip ]]; then
		rm -rf "$venv"
		python3 -m venv "$venv" >&2 || die "cannot create $venv (Debian: apt-get install python3-venv)"
	fi
	echo "photo-venv: installing ${PACKAGES[*]} from PyPI into $venv" >&2
	"$venv/bin/pip" install --quiet --disable-pip-version-check "${PACKAGES[@]}" >&2 ||
		die "cannot install ${PACKAGES[*]} from PyPI (is PyPI reachable?)"
	[[ $(installed) == "${PACKAGES[*]}" ]] || die "${PACKAGES[*]} did not install"
fi
echo "$venv/bin/python"
