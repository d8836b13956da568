#!/usr/bin/env bash
# Makes (once) the virtual environment the browser tests run Selenium from, and prints
# its python. Selenium 4.51.0 is the newest that installs on Debian 12's Python
# (4.52 needs a certifi newer than that Python's pip resolves here).
#
#   scripts/browser-venv.sh        prints the environment's python (makes it first)
#
# The environment lives at $TINYPERF_BROWSER_VENV, else .venv-browser in the repository root.
set -euo pipefail

SELENIUM_VERSION=4.51.0
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TINYPERF_BROWSER_VENV:-$repo_root/.venv-browser}

die() {
	echo "browser-venv: $*" >&2
	exit 1
}

installed() {
	"$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("selenium"))' 2>/dev/null || true
}

# Tests may ask at once; one of them makes the environment.
exec 9>"${TMPDIR:-/tmp}/browser-venv-$(printf '%s' "$venv" | cksum | cut -d' ' -f1).lock"
flock 9 || die "cannot take the lock"
if [[ $(installed) != "$SELENIUM_VERSION" ]]; then
	command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
	if [[ ! -x $venv/bin/pip ]]; then
		rm -rf "$venv"
		python3 -m venv "$venv" >&2 || die "cannot create $venv (Debian: apt-get install python3-venv)"
	fi
	echo "browser-venv: installing selenium==$SELENIUM_VERSION from PyPI into $venv" >&2
	"$venv/bin/pip" install --quiet --disable-pip-version-check "selenium==$SELENIUM_VERSION" >&2 ||
		die "cannot install selenium==$SELENIUM_VERSION from PyPI (is PyPI reachable?)"
	[[ $(installed) == "$SELENIUM_VERSION" ]] || die "selenium $SELENIUM_VERSION did not install"
fi
echo "$venv/bin/python"
