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

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$repo_root/scripts/pinned-venv.sh" "${TINYPERF_PHOTO_VENV:-$repo_root/.venv-photo}" \
	scikit-learn==1.9.1 scikit-image==0.26.0 pillow==13.0.0
