#!/usr/bin/env bash
# HTTP latency and throughput of GET /api/v1/status under 50 concurrent clients, against
# a real `tinyperf agent` process on a private D-Bus session bus, over loopback.
# Usage: scripts/bench-http.sh [path/to/tinyperf] [duration]
# Environment: CONNECTIONS (50), THREADS (2), ENDPOINT (/api/v1/status).
set -euo pipefail
bin=${1:-target/release/tinyperf}
duration=${2:-10s}
connections=${CONNECTIONS:-50}
threads=${THREADS:-2}
endpoint=${ENDPOINT:-/api/v1/status}

for tool in wrk dbus-daemon; do
  command -v "$tool" >/dev/null || {
    echo "bench-http: $tool is needed (apt-get install wrk dbus)" >&2
    exit 1
  }
done
[ -x "$bin" ] || { echo "bench-http: no tinyperf binary at $bin" >&2; exit 1; }

work=$(mktemp -d)
bus_pid=""
agent_pid=""
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

{ read -r bus_address; read -r bus_pid; } < <(
  dbus-daemon --session --fork --nosyslog --print-address=1 --print-pid=1
)

od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/token"
chmod 600 "$work/token"
cat >"$work/tinyperf.toml" <<EOF
listen = "127.0.0.1:0"
token_file = "$work/token"
state_dir = "$work/state"
EOF

TINYPERF_LOG=warn "$bin" agent --config "$work/tinyperf.toml" --bus "$bus_address" \
  >"$work/agent.out" 2>"$work/agent.log" &
agent_pid=$!

address=""
for _ in $(seq 300); do
  address=$(sed -n 's|^ready http://||p' "$work/agent.out")
  [ -n "$address" ] && break
  kill -0 "$agent_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$address" ]; then
  echo "bench-http: the agent did not become ready; its log:" >&2
  cat "$work/agent.log" >&2
  exit 1
fi

url="http://$address$endpoint"
curl -sf "$url" >/dev/null || { echo "bench-http: $url does not answer" >&2; exit 1; }
echo "bench-http: wrk -t$threads -c$connections -d$duration --latency $url (tinyperf agent $(
  "$bin" --version 2>/dev/null | awk '{print $2}'), $(nproc) CPUs)"
wrk -t"$threads" -c"$connections" -d"$duration" --latency "$url"
