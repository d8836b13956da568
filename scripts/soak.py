#!/usr/bin/env python3
"""A long soak of a real tinyperf agent on loopback, to show that it holds under a day's
load: RSS flat at a constant store size, no request failing, no run or worker left behind.

The agent (a private D-Bus session bus, HTTP on 127.0.0.1, retention 200) runs runs back to
back: inventory over HTTP and an external benchmark (a one-second sleep) over D-Bus, every
tenth cancelled; 20 HTTP readers on every page and API, 5 event streams, 2 D-Bus callers.
At KILL_AT_MINUTE the agent is killed (SIGKILL) and started again on the same state folder:
the run in flight must come back `interrupted`. Every SAMPLE_S the agent's RSS and the
latencies of the interval are written to soak.csv; at the end a summary by slices, and a
verdict: RSS flat after the warm-up (WARMUP_MINUTES) and no failed request.

Usage: scripts/soak.py [path/to/tinyperf] [--out DIR]
Environment: SOAK_MINUTES (60), KILL_AT_MINUTE (10; 0 for none), WARMUP_MINUTES (15),
SAMPLE_S (10), READERS (20), READ_INTERVAL_S (0.05), STREAMS (5), DBUS_CALLERS (2), RUNS (1;
0 for no runs).
Exit status: 0 when RSS is flat and nothing failed, 1 otherwise.
"""

import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MINUTES = float(os.environ.get("SOAK_MINUTES", "60"))
KILL_AT = float(os.environ.get("KILL_AT_MINUTE", "10"))
WARMUP = float(os.environ.get("WARMUP_MINUTES", "15"))
SAMPLE_S = float(os.environ.get("SAMPLE_S", "10"))
READERS = int(os.environ.get("READERS", "20"))
# Each reader's pause between requests: 20 readers at 0.05 s are about 400 requests a second.
READ_INTERVAL_S = float(os.environ.get("READ_INTERVAL_S", "0.05"))
STREAMS = int(os.environ.get("STREAMS", "5"))
# 0: no runs (the load of reading alone, to tell what grows with runs from what grows with reads).
RUNS = int(os.environ.get("RUNS", "1"))
DBUS_CALLERS = int(os.environ.get("DBUS_CALLERS", "2"))
TOKEN = "soak-" + "0123456789abcdef" * 4
NAME = "org.tinyperf.Agent1"
PATH = "/org/tinyperf/Agent1"
# RSS may move by this much after the warm-up and still be flat: allocator pages, the
# store's index at a constant size, caches of the newest runs.
FLAT_MB = 4.0


class Stats:
    """Counters and latencies of the current interval, shared by every load thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.requests = 0
        self.failures = []
        self.total_requests = 0
        self.runs = 0
        self.cancelled = 0
        self.busy = 0
        self.interrupted = []
        self.events = 0
        self.dbus_calls = 0

    def request(self, seconds, ok, what):
        with self.lock:
            self.latencies.append(seconds)
            self.requests += 1
            self.total_requests += 1
            if not ok:
                self.failures.append(what)

    def take(self):
        with self.lock:
            latencies, requests = self.latencies, self.requests
            self.latencies, self.requests = [], 0
            return latencies, requests


class Agent:
    """The agent process, started again after a kill on the same folder and bus."""

    def __init__(self, exe, work, bus):
        self.exe, self.work, self.bus = exe, work, bus
        self.process = None
        self.address = None
        self.lock = threading.Lock()
        self.restarting = threading.Event()

    def start(self):
        process = subprocess.Popen(
            [self.exe, "agent", "--config", os.path.join(self.work, "tinyperf.toml"),
             "--bus", self.bus],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.work, "agent.log"), "ab"),
            env=dict(os.environ, TINYPERF_LOG="warn"), text=True)
        started = time.monotonic()
        for line in process.stdout:
            if line.startswith("ready http://"):
                host, port = line.strip()[len("ready http://"):].rsplit(":", 1)
                with self.lock:
                    self.process, self.address = process, (host, int(port))
                threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
                return time.monotonic() - started
        raise SystemExit("soak: the agent did not start; see " + os.path.join(self.work, "agent.log"))

    def connection(self):
        with self.lock:
            host, port = self.address
        return http.client.HTTPConnection(host, port, timeout=30)

    def pid(self):
        with self.lock:
            return self.process.pid

    def rss_mb(self):
        try:
            with open(f"/proc/{self.pid()}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def kill_and_restart(self):
        self.restarting.set()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        took = self.start()
        self.restarting.clear()
        return took

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def get(agent, stats, path, connection=None):
    """One GET; a failure is any status but 2xx, or no answer outside a restart."""
    started = time.monotonic()
    try:
        conn = connection or agent.connection()
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        # A run's telemetry is 404 until its worker has written a sample, and for runs
        # that record none.
        ok = 200 <= response.status < 300 or (response.status == 404 and path.endswith("/telemetry"))
        stats.request(time.monotonic() - started, ok, f"GET {path}: {response.status}")
        return conn, body if ok else None
    except (OSError, http.client.HTTPException) as error:
        if not agent.restarting.is_set():
            stats.request(time.monotonic() - started, False, f"GET {path}: {error}")
        return None, None


def post(agent, path, body):
    conn = agent.connection()
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def busctl(bus, *args):
    return subprocess.run(["busctl", f"--address={bus}", "--json=short", "call", NAME, PATH, NAME,
                           *args], capture_output=True, text=True, timeout=30)


def reader(agent, stats, stop, newest):
    paths = ["/", "/api/v1/status", "/api/v1/runs", "/metrics", "/api/v1/hardware", "/healthz",
             "/api/v1/openapi.json"]
    conn, turn = None, 0
    while not stop.is_set():
        run = newest[0]
        path = paths[turn % len(paths)]
        if run and turn % 3 == 0:
            path = [f"/api/v1/runs/{run}", f"/runs/{run}", f"/api/v1/runs/{run}/telemetry"][turn % 9 // 3]
        turn += 1
        conn, _ = get(agent, stats, path, conn)
        time.sleep(0.2 if conn is None else READ_INTERVAL_S)


def stream(agent, stats, stop):
    while not stop.is_set():
        try:
            conn = agent.connection()
            conn.request("GET", "/api/v1/events")
            response = conn.getresponse()
            if response.status != 200:
                stats.request(0, False, f"events: {response.status}")
                time.sleep(1)
                continue
            while not stop.is_set():
                line = response.fp.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    with stats.lock:
                        stats.events += 1
        except (OSError, http.client.HTTPException):
            time.sleep(0.5)


def dbus_caller(agent, stats, stop):
    turn = 0
    while not stop.is_set():
        call = ("GetStatus",) if turn % 2 else ("ListRuns", "u", "20")
        turn += 1
        started = time.monotonic()
        done = busctl(agent.bus, *call)
        if done.returncode != 0 and not agent.restarting.is_set():
            stats.request(time.monotonic() - started, False, f"D-Bus {call[0]}: {done.stderr.strip()}")
        with stats.lock:
            stats.dbus_calls += 1
        time.sleep(0.2)


def run_state(agent, run):
    try:
        conn = agent.connection()
        conn.request("GET", f"/api/v1/runs/{run}")
        response = conn.getresponse()
        body = response.read()
        return json.loads(body)["state"] if response.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError, KeyError):
        return None


def runner(agent, stats, stop, newest, in_flight):
    number = 0
    while not stop.is_set():
        number += 1
        try:
            if number % 2:
                status, body = post(agent, "/api/v1/runs", {"suite": "inventory"})
                run = json.loads(body)["id"] if status == 202 else None
            else:
                done = busctl(agent.bus, "Start", "sa{sv}", "external", "1", "benchmark", "s", "sleeper")
                status = 202 if done.returncode == 0 else (409 if "Busy" in done.stderr else 500)
                run = json.loads(done.stdout)["data"][0] if done.returncode == 0 else None
        except (OSError, http.client.HTTPException, ValueError):
            time.sleep(0.5)
            continue
        if status == 409:
            # A run read as final must leave the agent free: a refusal here is a fault.
            with stats.lock:
                stats.busy += 1
            time.sleep(0.1)
            continue
        if run is None:
            stats.request(0, False, f"start: {status}")
            time.sleep(0.5)
            continue
        newest[0] = run
        in_flight[0] = run
        if number % 10 == 0:
            time.sleep(0.5)
            try:
                post(agent, f"/api/v1/runs/{run}/cancel", {})
            except (OSError, http.client.HTTPException):
                pass
        while not stop.is_set():
            state = run_state(agent, run)
            if state in ("passed", "failed", "error", "cancelled", "interrupted"):
                with stats.lock:
                    stats.runs += 1
                    stats.cancelled += state == "cancelled"
                    if state == "interrupted":
                        stats.interrupted.append(run)
                break
            time.sleep(0.05)
        in_flight[0] = None


def percentile(values, fraction):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(fraction * len(values)))]


def main():
    args = sys.argv[1:]
    out = "out/soak"
    if "--out" in args:
        at = args.index("--out")
        out = args[at + 1]
        del args[at:at + 2]
    exe = os.path.abspath(args[0] if args else "target/release/tinyperf")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"soak: no tinyperf binary at {exe}")
    for tool in ("dbus-daemon", "busctl"):
        if not shutil.which(tool):
            raise SystemExit(f"soak: {tool} is needed (apt-get install dbus systemd)")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tinyperf-soak.")
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(token, 0o600)
    with open(os.path.join(work, "tinyperf.toml"), "w") as f:
        f.write(f'listen = "127.0.0.1:0"\ntoken_file = "{token}"\nstate_dir = "{work}/state"\n'
                'retention = 200\ncancel_grace_s = 2\n'
                '[benchmarks.sleeper]\ncommand = ["sleep", "1"]\n')
    bus_out = subprocess.run(["dbus-daemon", "--session", "--fork", "--nosyslog",
                              "--print-address=1", "--print-pid=1"], capture_output=True, text=True,
                             check=True).stdout.split()
    bus, bus_pid = bus_out[0], int(bus_out[1])
    agent = Agent(exe, work, bus)
    stats = Stats()
    stop = threading.Event()
    newest, in_flight = [None], [None]
    first_start = agent.start()
    threads = [threading.Thread(target=reader, args=(agent, stats, stop, newest)) for _ in range(READERS)]
    threads += [threading.Thread(target=stream, args=(agent, stats, stop)) for _ in range(STREAMS)]
    threads += [threading.Thread(target=dbus_caller, args=(agent, stats, stop)) for _ in range(DBUS_CALLERS)]
    threads += [threading.Thread(target=runner, args=(agent, stats, stop, newest, in_flight))
                for _ in range(RUNS)]
    for thread in threads:
        thread.daemon = True
        thread.start()

    samples = []
    csv_path = os.path.join(out, "soak.csv")
    csv = open(csv_path, "w")
    csv.write("minute,rss_mb,requests_per_s,p50_ms,p99_ms,runs,failures\n")
    started = time.monotonic()
    killed, interrupted_run, restart_s = False, None, None
    print(f"soak: agent {exe}, {MINUTES:g} min, {READERS} readers, {STREAMS} event streams, "
          f"{DBUS_CALLERS} D-Bus callers, {'runs back to back' if RUNS else 'no runs'}; "
          f"started in {first_start:.2f} s; samples in {csv_path}", flush=True)
    try:
        while (minute := (time.monotonic() - started) / 60) < MINUTES:
            time.sleep(SAMPLE_S)
            minute = (time.monotonic() - started) / 60
            if KILL_AT and not killed and minute >= KILL_AT:
                interrupted_run = in_flight[0]
                restart_s = agent.kill_and_restart()
                killed = True
                print(f"soak: minute {minute:.1f}: agent killed (SIGKILL) with run {interrupted_run} "
                      f"in flight, serving again after {restart_s:.2f} s", flush=True)
            latencies, requests = stats.take()
            rss = agent.rss_mb()
            sample = {
                "minute": minute, "rss": rss, "rate": requests / SAMPLE_S,
                "p50": percentile(latencies, 0.5) * 1000, "p99": percentile(latencies, 0.99) * 1000,
                "runs": stats.runs, "failures": len(stats.failures),
            }
            samples.append(sample)
            csv.write("{minute:.2f},{rss:.1f},{rate:.0f},{p50:.2f},{p99:.2f},{runs},{failures}\n".format(
                **{**sample, "rss": rss or 0}))
            csv.flush()
    finally:
        stop.set()
        agent.stop()
        os.kill(bus_pid, signal.SIGKILL)
    time.sleep(1)
    leftovers = subprocess.run(["pgrep", "-f", work], capture_output=True, text=True).stdout.split()

    print("\nslice (min)   RSS MB   req/s   p50 ms   p99 ms   runs")
    slice_minutes = 5
    for start in range(0, int(MINUTES), slice_minutes):
        part = [s for s in samples if start <= s["minute"] < start + slice_minutes]
        if not part:
            continue
        rss = max(s["rss"] or 0 for s in part)
        print(f"{start:3d}-{start + slice_minutes:<3d}     {rss:6.1f}  {statistics.mean(s['rate'] for s in part):6.0f}"
              f"   {statistics.median(s['p50'] for s in part):6.2f}   {max(s['p99'] for s in part):6.2f}"
              f"   {part[-1]['runs']}")
    settled = [s["rss"] for s in samples if s["minute"] >= WARMUP and s["rss"]]
    verdict = 0
    if settled:
        spread = max(settled) - min(settled)
        third = max(1, len(settled) // 3)
        early, late = statistics.mean(settled[:third]), statistics.mean(settled[-third:])
        flat = spread <= FLAT_MB
        print(f"\nRSS after minute {WARMUP:g}: {min(settled):.1f}-{max(settled):.1f} MB (spread {spread:.1f} MB, "
              f"first third {early:.1f}, last third {late:.1f}): {'flat' if flat else 'NOT FLAT'} "
              f"(bound {FLAT_MB:g} MB)")
        verdict |= not flat
    else:
        print(f"\nRSS: no sample after minute {WARMUP:g}")
        verdict = 1
    print(f"requests {stats.total_requests}, failed {len(stats.failures)}, events {stats.events}, "
          f"D-Bus calls {stats.dbus_calls}, runs {stats.runs} ({stats.cancelled} cancelled, "
          f"{len(stats.interrupted)} interrupted), starts refused busy {stats.busy}")
    if killed:
        print(f"agent killed at minute {KILL_AT:g} with run {interrupted_run} in flight; serving again "
              f"after {restart_s:.2f} s; runs read back interrupted: {', '.join(stats.interrupted) or 'none'}")
        if interrupted_run and interrupted_run not in stats.interrupted:
            print(f"the run in flight at the kill, {interrupted_run}, was not read back interrupted")
            verdict = 1
    for failure in stats.failures[:10]:
        print(f"  failed: {failure}")
    if stats.failures or stats.busy:
        verdict = 1
    if leftovers:
        print(f"left running after the agent stopped: {' '.join(leftovers)}")
        verdict = 1
    shutil.rmtree(work, ignore_errors=True)
    print("soak: " + ("pass" if verdict == 0 else "FAIL"))
    return verdict


if __name__ == "__main__":
    sys.exit(main())
