#!/usr/bin/env python3
"""The summary of `make gpu-speed`: reads each variant's `tinyperf gpu check --json-out`
report (or PyTorch's JSON lines) and its exit status from OUT_DIR, writes
OUT_DIR/gpu-speed.json and prints one table: img/s, median step, ratio to PyTorch AMP,
peak device memory, and how each variant ended.

Usage: gpu_speed_table.py OUT_DIR VARIANT...   (in the order the table lists them)
A variant NAME has OUT_DIR/NAME.rc (its exit status; 124 or 137 is a timeout) and
OUT_DIR/NAME.json (tinyperf) or OUT_DIR/NAME.jsonl (PyTorch).
"""
import json
import os
import sys

TORCH_AMP = "torch-amp"


def read_rc(out, name):
    """The exit status, "skipped", or None when the variant did not run."""
    try:
        with open(os.path.join(out, name + ".rc")) as f:
            text = f.read().strip()
    except OSError:
        return None
    return text if text == "skipped" else int(text)


def tinyperf_row(path):
    with open(path) as f:
        reports = json.load(f)
    figures = [t for r in reports for t in r.get("throughput", [])]
    errors = [e for r in reports for e in r.get("errors", [])]
    if not figures:
        return None, errors
    t = figures[0]
    return {
        "img_per_s": t["img_per_s"],
        "step_ms": t["step_ms_median"],
        "peak_memory_gib": t["peak_memory_in_use_gib"],
        "precision": t["precision"],
    }, errors


def torch_row(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip().startswith("{")]
    for line in lines:
        if line.get("precision") == "amp-fp16" and "img_per_s" in line:
            return {
                "img_per_s": line["img_per_s"],
                "step_ms": line["step_ms_median"],
                "peak_memory_gib": line["peak_mem_bytes"] / 2**30,
                "precision": "PyTorch AMP fp16, channels_last",
            }, []
    return None, []


def row(out, name):
    rc = read_rc(out, name)
    figure, errors = None, []
    for ext, reader in ((".json", tinyperf_row), (".jsonl", torch_row)):
        path = os.path.join(out, name + ext)
        if os.path.exists(path):
            try:
                figure, errors = reader(path)
            except (OSError, ValueError, KeyError, TypeError) as e:
                errors = [f"unreadable {name + ext}: {e}"]
            break
    if rc is None:
        status = "not run"
    elif rc == "skipped":
        status = "skipped (budget spent)"
    elif name.startswith("check"):
        status = "passed" if rc == 0 else ("timed out" if rc in (124, 137) else "FAILED")
    elif rc in (124, 137):
        status = "timed out"
    elif figure is None:
        status = f"failed (exit {rc})"
    elif rc != 0:
        status = f"exit {rc}"
    else:
        status = "ok"
    entry = {"variant": name, "status": status, "exit_status": rc, "errors": errors}
    entry.update(figure or {})
    return entry


def build(out, names):
    rows = [row(out, n) for n in names]
    amp = next((r for r in rows if r["variant"] == TORCH_AMP and "img_per_s" in r), None)
    for r in rows:
        if amp and "img_per_s" in r:
            r["ratio_to_torch_amp"] = r["img_per_s"] / amp["img_per_s"]
    return rows


def table(rows):
    lines = [f"{'variant':<22} {'img/s':>8} {'step ms':>8} {'x AMP':>6} {'mem GiB':>8}  status"]
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if key in r else "-"
        lines.append(
            f"{r['variant']:<22} {f('img_per_s', '.0f'):>8} {f('step_ms', '.1f'):>8} "
            f"{f('ratio_to_torch_amp', '.2f'):>6} {f('peak_memory_gib', '.1f'):>8}  {r['status']}"
        )
    return "\n".join(lines)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, names = sys.argv[1], sys.argv[2:]
    rows = build(out, names)
    with open(os.path.join(out, "gpu-speed.json"), "w") as f:
        json.dump({"variants": rows}, f, indent=2)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
