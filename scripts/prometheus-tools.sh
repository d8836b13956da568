#!/usr/bin/env bash
# Unpacks Debian's prometheus package (2.42, which carries promtool) into a folder, for
# the tests: `promtool check metrics|config|rules`, `promtool test rules`, and a real
# Prometheus scraping real agents.
#
#   scripts/prometheus-tools.sh        prints the folder holding `prometheus` and `promtool`
#
# The package is unpacked rather than installed: installing it adds a system user and
# enables and starts a Prometheus service on port 9090, none of which a test wants. Both
# programs are static Go binaries, so the unpacked ones run as they are. The folder is
# $TINYPERF_PROMETHEUS_DIR, else target/prometheus-tools in the repository root.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${TINYPERF_PROMETHEUS_DIR:-$repo_root/target/prometheus-tools}
bin=$dest/usr/bin

if [ -x "$bin/promtool" ] && [ -x "$bin/prometheus" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download needs the package lists; a fresh machine may not have them yet.
if ! (cd "$work" && apt-get download prometheus >/dev/null 2>&1); then
	if [ "$(id -u)" -ne 0 ]; then
		echo "prometheus-tools: cannot download the prometheus package (need root for apt-get update)" >&2
		exit 1
	fi
	apt-get update -qq
	(cd "$work" && apt-get download prometheus >/dev/null)
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/unpacked"
mkdir -p "$bin"
install -m 0755 "$work/unpacked/usr/bin/prometheus" "$work/unpacked/usr/bin/promtool" "$bin/"
"$bin/promtool" --version >/dev/null
echo "$bin"
