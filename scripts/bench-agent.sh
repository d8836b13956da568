#!/usr/bin/env bash
# The agent with a long history, beside the build it replaced, in the same run: 1,000 stored
# runs of a tinybox green's size (the inventory of tests/fixtures/tinybox-green, as the worker
# records it), then for each build: latency of /, /runs/{id} (the newest run's page; a build
# without that page answers 404, reported as such), /api/v1/runs, /metrics and /api/v1/status
# under 50 clients (wrk), D-Bus ListRuns(0) latency under 50 callers (busctl), and the agent's
# RSS after 60 s of 50 clients on /. Then a live phase: each build on the tinybox red fixture
# tree (six amdgpu hwmon GPUs with power, temperatures and busy percent), with a run in
# progress (an external benchmark that sleeps, started over HTTP) so /metrics carries the live
# GPU gauges, and / and /metrics measured during it. Both agents run on private D-Bus session
# buses, over loopback. The figures are printed side by side, once per round.
#
# Usage: scripts/bench-agent.sh [path/to/new/tinyperf] [path/to/base/tinyperf]
# Without a base binary, the base commit (BASE, default cf9fb8d) is checked out as a git
# worktree under target/bench/ and built in release into target/bench/base-target.
# Last, the history phase: the new build's /metrics and / on stored histories of each size in
# SCALE_RUNS, with the cost at the largest beside the cost at the smallest (goal: /metrics at
# 10,000 runs within 1.2x of its cost at 100).
# Environment: RUNS (1000), CONNECTIONS (50), DURATION (10s), RSS_DURATION (60s), ROUNDS (2),
# BASE (cf9fb8d), MEMORY_LIMIT_MB (8192: the address space each agent may take),
# SCALE_RUNS ("100 10000"), SCALE_WITH_BASE (0; 1: the base too, in the history phase),
# SCALE_ONLY (0; 1: the history phase alone).
set -euo pipefail
cd "$(dirname "$0")/.."
new_bin=${1:-target/release/tinyperf}
base_bin=${2:-}
runs=${RUNS:-1000}
connections=${CONNECTIONS:-50}
duration=${DURATION:-10s}
rss_duration=${RSS_DURATION:-60s}
rounds=${ROUNDS:-2}
base_rev=${BASE:-cf9fb8d}
# What the base is: the commit built here, or a binary given by path (whose commit
# this script cannot know).
if [ -n "$base_bin" ]; then base_label="given binary"; else base_label=$base_rev; fi
memory_limit_mb=${MEMORY_LIMIT_MB:-8192}
scale_runs=${SCALE_RUNS:-100 10000}
scale_with_base=${SCALE_WITH_BASE:-0}
scale_only=${SCALE_ONLY:-0}

for tool in wrk dbus-daemon busctl python3 git curl; do
  if ! command -v "$tool" >/dev/null; then
    case "$tool" in
      wrk) pkg=wrk ;; dbus-daemon) pkg=dbus ;; busctl) pkg=systemd ;; *) pkg=$tool ;;
    esac
    if [ "$(id -u)" -eq 0 ]; then
      echo "bench-agent: installing $pkg" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    else
      echo "bench-agent: $tool is needed (apt-get install $pkg)" >&2
      exit 1
    fi
  fi
done
[ -x "$new_bin" ] || { echo "bench-agent: no tinyperf binary at $new_bin" >&2; exit 1; }

if [ -z "$base_bin" ]; then
  base_src=target/bench/base-src
  base_bin=target/bench/base-target/release/tinyperf
  if [ ! -d "$base_src" ]; then
    git worktree add --detach "$base_src" "$base_rev" >/dev/null
  fi
  if [ ! -x "$base_bin" ]; then
    echo "bench-agent: building the base ($base_rev) in release; once, it takes a while" >&2
    (cd "$base_src" && CARGO_TARGET_DIR="$PWD/../base-target" cargo build --release --quiet)
  fi
fi
[ -x "$base_bin" ] || { echo "bench-agent: no base binary at $base_bin" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# One tinybox green record, then $runs copies of it under their own ids and times.
"$new_bin" run inventory --events jsonl --root tests/fixtures/tinybox-green \
  --state-dir "$work/template" >/dev/null 2>&1 || true
template=$(ls "$work"/template/runs/*/run.json | head -1)
# make_history DIR COUNT: COUNT copies of the template record under their own ids and times.
make_history() {
  python3 - "$template" "$1" "$2" <<'EOF'
import datetime, json, os, sys
template, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
record = json.load(open(template))
start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
for i in range(count):
    at = start + datetime.timedelta(minutes=i)
    rid = at.strftime("%Y%m%d-%H%M%S") + "-%06x" % i
    record["id"] = rid
    record["started_at"] = at.isoformat().replace("+00:00", "Z")
    record["finished_at"] = (at + datetime.timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    os.makedirs(f"{out}/runs/{rid}")
    with open(f"{out}/runs/{rid}/run.json", "w") as f:
        json.dump(record, f, indent=2)
EOF
}
make_history "$work/history" "$runs"
newest_run=$(ls "$work/history/runs" | sort | tail -1)
size=$(du -sh "$work/history/runs" | cut -f1)
echo "bench-agent: $runs records of $(stat -c %s "$template") bytes each ($size), $(nproc) CPUs," \
  "$connections clients; new $new_bin, base $base_bin ($base_label)"

# The live phase's run: an external benchmark that only sleeps, so the run stays in progress
# and the worker samples the fixture tree's GPUs all along.
live_root=tests/fixtures/tinybox-red
live_benchmark='[benchmarks.sleep]
command = ["sleep", "3600"]'

# start_agent NAME BINARY [ROOT]: a private bus and an agent on a copy of the history (over
# the sysfs tree ROOT, default /); sets $addr, $bus, $pid, $token.
start_agent() {
  local name=$1 bin=$2 root=${3:-/} dir=$work/$1
  mkdir -p "$dir"
  cp -a "${history:-$work/history}" "$dir/state"
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/token"
  chmod 600 "$dir/token"
  token=$(cat "$dir/token")
  printf 'listen = "127.0.0.1:0"\ntoken_file = "%s"\nstate_dir = "%s"\nretention = %d\n%s\n' \
    "$dir/token" "$dir/state" $((${history_runs:-$runs} * 2)) "$live_benchmark" >"$dir/tinyperf.toml"
  local bus_pid
  { read -r bus; read -r bus_pid; } < <(dbus-daemon --session --fork --nosyslog --print-address=1 --print-pid=1)
  pids+=("$bus_pid")
  # The base build reads every record per request and can grow by gigabytes: its address
  # space is capped so a shared machine survives it (an allocation past the cap aborts it,
  # which the figures then show as errors).
  (ulimit -v $((memory_limit_mb * 1024)); TINYPERF_LOG=warn exec "$bin" agent \
    --config "$dir/tinyperf.toml" --bus "$bus" --root "$root" >"$dir/out" 2>"$dir/log") &
  pid=$!
  pids+=("$pid")
  addr=""
  for _ in $(seq 1200); do
    addr=$(sed -n 's|^ready http://||p' "$dir/out")
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "bench-agent: the $name agent did not start:" >&2; cat "$dir/log" >&2; exit 1; }
}

rss_mib() {
  if [ -r "/proc/$1/status" ]; then
    awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"
  else
    echo died
  fi
}

# alive NAME BINARY: restarts the agent when the last measurement killed it, saying so.
alive() {
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "bench-agent: the $1 agent died (past MEMORY_LIMIT_MB=$memory_limit_mb?); restarting it" >&2
    echo "$round $1 restarts 1" >>"$work/results"
    start_agent "$1-$round-again-$RANDOM" "$2"
  fi
}

# wrk_stats URL DURATION: "req/s p50_ms p99_ms errors"
wrk_stats() {
  wrk -t2 -c"$connections" -d"$2" --timeout 30s --latency "$1" 2>&1 | python3 -c '
import re, sys
text = sys.stdin.read()
def ms(label):
    m = re.search(r"^\s*" + label + r"\s+([\d.]+)(us|ms|s)\b", text, re.M)
    if not m:
        return float("nan")
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors += int(non2xx.group(1)) if non2xx else 0
p50, p99 = ms("50%"), ms("99%")
print(f"{float(rps.group(1)) if rps else 0:.1f} {p50:.2f} {p99:.2f} {errors}")
'
}

# listruns_stats BUS SECONDS: ListRuns(0) under $connections callers: "calls/s p50_ms p99_ms errors"
listruns_stats() {
  python3 - "$1" "$2" "$connections" <<'EOF'
import subprocess, sys, threading, time
bus, seconds, callers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
cmd = ["busctl", f"--address={bus}", "--timeout=60", "call", "org.tinyperf.Agent1",
       "/org/tinyperf/Agent1", "org.tinyperf.Agent1", "ListRuns", "u", "0"]
took, errors, lock = [], [0], threading.Lock()
end = time.monotonic() + seconds
def caller():
    while time.monotonic() < end:
        t0 = time.monotonic()
        ok = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        with lock:
            (took.append((time.monotonic() - t0) * 1000) if ok else errors.__setitem__(0, errors[0] + 1))
threads = [threading.Thread(target=caller) for _ in range(callers)]
started = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
took.sort()
q = lambda p: took[min(len(took) - 1, int(p * len(took)))] if took else float("nan")
print(f"{len(took) / (time.monotonic() - started):.1f} {q(0.5):.2f} {q(0.99):.2f} {errors[0]}")
EOF
}

# http_status URL: the status code of one GET
http_status() {
  curl -s -o /dev/null -w '%{http_code}' "$1" || echo 000
}

# measure_path NAME ROUND LABEL URL: wrk on URL, or "absent" when the build answers 404 there
measure_path() {
  local name=$1 round=$2 label=$3 url=$4
  if [ "$(http_status "$url")" = 404 ]; then
    echo "$round $name $label absent" >>"$work/results"
    return
  fi
  read -r rps p50 p99 errs < <(wrk_stats "$url" "$duration")
  echo "$round $name $label $rps $p50 $p99 $errs" >>"$work/results"
}

# measure NAME BINARY ROUND: one line per figure into $work/results
measure() {
  local name=$1 bin=$2 round=$3
  start_agent "$name-$round" "$bin"
  local idle
  idle=$(rss_mib "$pid")
  echo "$round $name rss_idle_mib $idle" >>"$work/results"
  for path in / "/runs/$newest_run" /api/v1/runs /metrics /api/v1/status; do
    alive "$name" "$bin"
    local label=$path
    [ "$path" = "/runs/$newest_run" ] && label='/runs/{id}'
    measure_path "$name" "$round" "$label" "http://$addr$path"
  done
  alive "$name" "$bin"
  read -r rps p50 p99 errs < <(listruns_stats "$bus" "${duration%s}")
  echo "$round $name ListRuns(0) $rps $p50 $p99 $errs" >>"$work/results"
  alive "$name" "$bin"
  wrk_stats "http://$addr/" "$rss_duration" >/dev/null
  echo "$round $name rss_after_load_mib $(rss_mib "$pid")" >>"$work/results"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  measure_live "$name" "$bin" "$round"
}

# measure_live NAME BINARY ROUND: / and /metrics while a run samples six GPUs' telemetry
measure_live() {
  local name=$1 bin=$2 round=$3
  start_agent "$name-$round-live" "$bin" "$live_root"
  local answer run_id gauges=0
  answer=$(curl -s -X POST -H "authorization: Bearer $token" -H 'content-type: application/json' \
    -d '{"suite": "external", "options": {"benchmark": "sleep"}}' "http://$addr/api/v1/runs")
  run_id=$(printf '%s' "$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("id", ""))' 2>/dev/null || true)
  if [ -z "$run_id" ]; then
    echo "bench-agent: the $name agent did not start the live run: $answer" >&2
    echo "$round $name live_gpu_gauges none" >>"$work/results"
  else
    # Until the first telemetry sample is in (a build without live gauges: 10 s of the run).
    for _ in $(seq 100); do
      gauges=$(curl -s "http://$addr/metrics" | grep -c '^tinyperf_gpu_power_watts{' || true)
      [ "$gauges" -gt 0 ] && break
      sleep 0.1
    done
    echo "$round $name live_gpu_gauges $gauges" >>"$work/results"
    for path in / /metrics; do
      measure_path "$name" "$round" "live:$path" "http://$addr$path"
    done
    curl -s -o /dev/null -X POST -H "authorization: Bearer $token" "http://$addr/api/v1/runs/$run_id/cancel" || true
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

: >"$work/results"
if [ "$scale_only" != 1 ]; then
  for round in $(seq "$rounds"); do
    echo "bench-agent: round $round: base" >&2
    measure base "$base_bin" "$round"
    echo "bench-agent: round $round: new" >&2
    measure new "$new_bin" "$round"
  done
fi

# The history phase: /metrics and / on histories of each size in $SCALE_RUNS, so a cost that
# grows with the number of stored runs shows as a ratio between the smallest and the largest.
: >"$work/scale"
scale_builds="new"
[ "$scale_with_base" = 1 ] && scale_builds="base new"
for count in $scale_runs; do
  echo "bench-agent: history of $count runs" >&2
  history=$work/history-$count
  history_runs=$count
  make_history "$history" "$count"
  for build in $scale_builds; do
    if [ "$build" = base ]; then bin=$base_bin; else bin=$new_bin; fi
    for round in $(seq "$rounds"); do
      start_agent "$build-scale-$count-$round" "$bin"
      for path in /metrics /; do
        read -r rps p50 p99 errs < <(wrk_stats "http://$addr$path" "$duration")
        echo "$count $build $path $round $rps $p50 $p99 $errs" >>"$work/scale"
      done
      echo "$count $build rss $round $(rss_mib "$pid")" >>"$work/scale"
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done
  done
  rm -rf "$history"
  unset history history_runs
done

[ "$scale_only" = 1 ] || python3 - "$work/results" "$runs" "$connections" "$rss_duration" <<'EOF'
import collections, sys
path, runs, clients, rss_duration = sys.argv[1:5]
rows = collections.defaultdict(dict)
for line in open(path):
    f = line.split()
    rows[(f[0], f[2])][f[1]] = f[3:]
goals = {"/": 20, "/runs/{id}": 20, "/api/v1/runs": 20, "/metrics": 20, "/api/v1/status": 5,
         "live:/metrics": 20, "live:/": 20}
print(f"\n{runs} stored runs, {clients} clients; latency in ms; base = previous build, new = this one")
print(f"{'round':>5}  {'what':<22} {'base req/s':>10} {'p50':>9} {'p99':>9} {'err':>5}   "
      f"{'new req/s':>10} {'p50':>9} {'p99':>9} {'err':>5}   goal")
for (rnd, what), by in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1].startswith("rss"), kv[0][1])):
    b, n = by.get("base", []), by.get("new", [])
    if what == "live_gpu_gauges":
        print(f"{rnd:>5}  {'live GPU power gauges':<22} {b[0] if b else '-':>10} {'':>31}   {n[0] if n else '-':>10}")
        continue
    if what == "restarts":
        print(f"{rnd:>5}  {'agent died, restarted':<22} {b[0] if b else '0':>10} {'':>31}   {n[0] if n else '0':>10}")
        continue
    if what.startswith("rss"):
        goal = "≤ 64 MiB" if what == "rss_after_load_mib" else ""
        label = f"RSS idle (MiB)" if what == "rss_idle_mib" else f"RSS after {rss_duration} on / (MiB)"
        verdict = ""
        if goal and n:
            verdict = " met" if n[0] != "died" and float(n[0]) <= 64 else " missed"
        print(f"{rnd:>5}  {label:<22} {b[0] if b else '-':>10} {'':>9} {'':>9} {'':>5}   "
              f"{n[0] if n else '-':>10} {'':>9} {'':>9} {'':>5}   {goal}{verdict}")
        continue
    goal = goals.get(what)
    verdict = ""
    if n and n[0] == "absent":
        verdict = "404: not in this build"
    elif goal is not None and n:
        verdict = f"p99 ≤ {goal} ms " + ("met" if float(n[2]) <= goal else "missed")
    cells = lambda v: (f"{'404':>10} {'absent':>9} {'':>9} {'':>5}" if v and v[0] == "absent" else
                       f"{v[0]:>10} {v[1]:>9} {v[2]:>9} {v[3]:>5}" if v else f"{'-':>10} {'-':>9} {'-':>9} {'-':>5}")
    print(f"{rnd:>5}  {what:<22} {cells(b)}   {cells(n)}   {verdict}")
EOF

python3 - "$work/scale" "$connections" <<'EOF'
import collections, statistics, sys
path, clients = sys.argv[1:3]
figures = collections.defaultdict(list)
rss = collections.defaultdict(list)
for line in open(path):
    f = line.split()
    if f[2] == "rss":
        rss[(f[1], int(f[0]))].append(f[4])
    else:
        figures[(f[1], f[2], int(f[0]))].append([float(v) for v in f[4:8]])
if not figures:
    sys.exit(0)
print(f"\nhistory phase: {clients} clients; median over rounds; latency in ms")
print(f"{'build':<6} {'path':<9} {'runs':>6} {'req/s':>10} {'p50':>8} {'p99':>8} {'err':>5} {'RSS MiB':>8}   cost vs smallest")
for build in ("base", "new"):
    for what in ("/metrics", "/"):
        sizes = sorted(n for (b, w, n) in figures if b == build and w == what)
        if not sizes:
            continue
        med = lambda n, i: statistics.median(r[i] for r in figures[(build, what, n)])
        for n in sizes:
            ratio = med(sizes[0], 0) / med(n, 0) if med(n, 0) else float("inf")
            verdict = ""
            if what == "/metrics" and n != sizes[0]:
                verdict = f"{ratio:.2f}x" + (" (goal <= 1.2x: met)" if ratio <= 1.2 else " (goal <= 1.2x: missed)")
            elif n != sizes[0]:
                verdict = f"{ratio:.2f}x"
            print(f"{build:<6} {what:<9} {n:>6} {med(n, 0):>10.1f} {med(n, 1):>8.2f} {med(n, 2):>8.2f} "
                  f"{int(med(n, 3)):>5} {'/'.join(rss[(build, n)]):>8}   {verdict}")
EOF
