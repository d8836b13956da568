#!/usr/bin/env bash
# Makes (once) the virtual environment the browser tests run Selenium from, and prints
# its python. Selenium 4.51.0 is the newest that installs on Debian 12's Python
# (4.52 needs a certifi newer than that Python's pip resolves here).
#
#   scripts/browser-venv.sh        prints the environment's python (makes it first)
#
# The environment lives at $TINYPERF_BROWSER_VENV, else .venv-browser in the repository root.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$repo_root/scripts/pinned-venv.sh" "${TINYPERF_BROWSER_VENV:-$repo_root/.venv-browser}" \
	selenium==4.51.0
