#!/usr/bin/env python3
"""MLPerf ResNet results written with mlperf-logging's own `mllog` library, in the
styles other frameworks log in, and their official scores.

    mlperf_results.py generate OUT     writes OUT/<style>/<org>/{systems,results}/...
    mlperf_results.py summarize ORG    prints {"<system>": {"time_to_train_min": ..,
                                       "energy_j": ..}} as result_summarizer computes

Styles (five runs each unless said):
  mxnet     NVIDIA MXNet-like: block_start/stop, eval every 4 epochs from epoch 2,
            tracked_stats, extra keys, a rank prefix on every line; one run never
            converges (dropped as the slowest)
  pytorch   PyTorch-like, open division, SGD keys, epoch_start/stop, keys reordered in
            each JSON object, time_ms as a string, log noise between lines, a repeated
            identical run_start
  tinygrad  tinygrad-like: an init process and a run process in one file, stop keys as
            POINT_IN_TIME, evals at 4n+3 and every epoch from 33, training progress
            printed between the lines, an MLLOG line written into the middle of a
            progress line, power logs every 2 s; one run killed mid-line (truncated)
  short     three runs only
  failing   two runs never converge: no score
Run with the Python of the environment scripts/mlperf-check.sh makes.
"""
import contextlib
import json
import logging
import math
import os
import random
import sys

from mlperf_logging.mllog import mllog

T0 = 1_715_318_457_308
TRAIN_SAMPLES = 1_281_167
RULESET = "4.0.0"


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


_loggers = 0


def new_logger():
    global _loggers
    _loggers += 1
    logger = logging.getLogger(f"mlperf_results_{_loggers}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    capture = Capture()
    logger.addHandler(capture)
    return mllog.MLLogger(logger=logger, root_dir=os.path.dirname(os.path.abspath(__file__))), capture


def system_desc(org, system, division):
    return {
        "submitter": org, "division": division, "status": "Available on-premise",
        "system_name": system, "number_of_nodes": "1", "host_processors_per_node": "1",
        "host_processor_model_name": "AMD EPYC 7532 32-Core Processor",
        "host_processor_core_count": "32", "host_processor_vcpu_count": "64",
        "host_processor_frequency": "", "host_processor_caches": "",
        "host_processor_interconnect": "", "host_memory_capacity": "128 GB",
        "host_storage_type": "NVMe SSD", "host_storage_capacity": "4 TB",
        "host_networking": "", "host_networking_topology": "",
        "host_memory_configuration": "", "accelerators_per_node": "6",
        "accelerator_model_name": "NVIDIA GeForce RTX 4090",
        "accelerator_host_interconnect": "PCIe 4.0 x16", "accelerator_frequency": "",
        "accelerator_on-chip_memories": "", "accelerator_memory_configuration": "GDDR6X",
        "accelerator_memory_capacity": "24 GB", "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "", "cooling": "air", "hw_notes": "",
        "framework": "test", "other_software_stack": {}, "operating_system": "Debian 12",
        "sw_notes": "",
    }


def submission(log, t, org, platform, division, status="onprem"):
    for key, value in [("submission_org", org), ("submission_platform", platform),
                       ("submission_division", division), ("submission_status", status),
                       ("submission_benchmark", "resnet")]:
        log.event(key=key, value=value, time_ms=t)


def lars_header(log, t, seed, batch):
    for key, value in [("seed", seed), ("global_batch_size", batch),
                       ("train_samples", TRAIN_SAMPLES), ("eval_samples", 50000),
                       ("gradient_accumulation_steps", 1), ("opt_name", "lars"),
                       ("lars_opt_base_learning_rate", 7.2), ("lars_opt_end_learning_rate", 0.0001),
                       ("lars_opt_learning_rate_decay_poly_power", 2),
                       ("lars_opt_learning_rate_decay_steps", 37), ("lars_epsilon", 0.0),
                       ("lars_opt_learning_rate_warmup_epochs", 2), ("lars_opt_momentum", 0.9),
                       ("lars_opt_weight_decay", 0.0002)]:
        log.event(key=key, value=value, time_ms=t)


def accuracy_curve(rng, converge_epoch, epochs):
    """Top-1 per epoch: rising, reaching 0.759 first at `converge_epoch` (None: never)."""
    out = {}
    for e in range(1, epochs + 1):
        if converge_epoch is None:
            out[e] = 0.758 * (1 - math.exp(-e / 6.0))
        elif e < converge_epoch:
            out[e] = min(0.7585, 0.759 * (1 - math.exp(-e / 6.0)) - 0.001 * (converge_epoch - e))
        else:
            out[e] = 0.7591 + 0.0004 * rng.random()
    return out


def mxnet_run(rng, seed, converge, org, platform):
    log, cap = new_logger()
    t = T0 + seed * 10_000_000
    submission(log, t, org, platform, "closed")
    log.event(key="cache_clear", value=True, time_ms=t)
    log.start(key="init_start", time_ms=t + 1)
    log.event(key="weights_initialization", metadata={"tensor": "conv0_weight"}, time_ms=t + 2)
    log.event(key="model_bn_span", value=400, time_ms=t + 3)
    t += 600_000
    log.end(key="init_stop", time_ms=t)
    t += 13
    log.start(key="run_start", time_ms=t)
    lars_header(log, t + 1, seed, 3200)
    curve = accuracy_curve(rng, converge, 37)
    epoch, status = 1, "aborted"
    while epoch <= 37:
        count = 2 if epoch == 1 else 4
        log.start(key="block_start", value=None, metadata={"first_epoch_num": epoch, "epoch_count": count}, time_ms=t)
        last = epoch + count - 1
        for e in range(epoch, last + 1):
            t += 21_000 + rng.randrange(1000)
            log.event(key="tracked_stats", value={"throughput": 57000.0 + rng.random()}, metadata={"step": e}, time_ms=t)
        log.start(key="eval_start", value=None, metadata={"epoch_num": last}, time_ms=t)
        t += 1500
        log.event(key="eval_accuracy", value=curve[min(last, 37)], metadata={"epoch_num": last}, time_ms=t)
        log.end(key="eval_stop", value=None, metadata={"epoch_num": last}, time_ms=t)
        log.end(key="block_stop", value=None, metadata={"first_epoch_num": epoch}, time_ms=t)
        if curve[min(last, 37)] >= 0.759:
            status = "success"
            break
        epoch = last + 1
    log.end(key="run_stop", value=None, metadata={"status": status}, time_ms=t + 5)
    return ["[1,0]<stdout>:" + line for line in cap.lines]


def pytorch_run(rng, seed, converge, org, platform):
    log, cap = new_logger()
    t = T0 + seed * 7_000_000
    submission(log, t, org, platform, "open", status="research")
    log.event(key="cache_clear", value=True, time_ms=t)
    log.start(key="init_start", time_ms=t)
    t += 90_000
    log.end(key="init_stop", time_ms=t)
    log.start(key="run_start", time_ms=t + 1)
    t += 1
    for key, value in [("seed", seed), ("global_batch_size", 1024), ("train_samples", TRAIN_SAMPLES),
                       ("eval_samples", 50000), ("gradient_accumulation_steps", 1), ("opt_name", "sgd"),
                       ("sgd_opt_base_learning_rate", 2.048), ("sgd_opt_end_learning_rate", 0.0001),
                       ("sgd_opt_learning_rate_decay_poly_power", 2), ("sgd_opt_learning_rate_decay_steps", 30000),
                       ("sgd_opt_weight_decay", 0.0001), ("sgd_opt_momentum", 0.9), ("model_bn_span", 128),
                       ("opt_learning_rate_warmup_epochs", 5)]:
        log.event(key=key, value=value, time_ms=t)
    curve = accuracy_curve(rng, converge, 45)
    status = "aborted"
    for e in range(1, 46):
        log.start(key="epoch_start", value=e, metadata={"epoch_num": e}, time_ms=t)
        t += 300_000 + rng.randrange(5000)
        log.end(key="epoch_stop", value=e, metadata={"epoch_num": e}, time_ms=t)
        log.start(key="eval_start", value=e, metadata={"epoch_num": e}, time_ms=t)
        t += 20_000
        log.event(key="eval_accuracy", value=curve[e], metadata={"epoch_num": e}, time_ms=t)
        log.end(key="eval_stop", value=e, metadata={"epoch_num": e}, time_ms=t)
        if curve[e] >= 0.7590:
            status = "success"
            break
    log.end(key="run_stop", value=None, metadata={"status": status}, time_ms=t + 3)
    out = []
    order = ["key", "value", "metadata", "time_ms", "namespace", "event_type"]
    for i, line in enumerate(cap.lines):
        d = json.loads(line[len(":::MLLOG "):])
        if i % 3 == 0:
            d["time_ms"] = str(d["time_ms"])
        d = {k: d[k] for k in order}
        out.append(":::MLLOG " + json.dumps(d, separators=(",", ":")))
        if d["key"] == "run_start":
            out.append(out[-1])
        if i % 5 == 0:
            out.append(f"INFO:root:epoch progress {i}%|#####     | loss=1.{i:03d}")
    return out


def tinygrad_run(rng, seed, converge, org, platform, truncate=False):
    init, cap_init = new_logger()
    t = T0 + seed * 13_000_000
    submission(init, t, org, platform, "closed")
    init.event(key="cache_clear", value=True, time_ms=t)
    init.start(key="init_start", value=None, time_ms=t)
    t += 1_799_999
    init.event(key="init_stop", value=None, time_ms=t)
    run, cap_run = new_logger()
    run.start(key="run_start", value=None, time_ms=t)
    t_run_start = t
    t += 40_000
    lars_header(run, t, seed, 1536)
    curve = accuracy_curve(rng, converge, 37)
    status = "aborted"
    progress = []
    for e in range(1, 38):
        run.start(key="epoch_start", value=e, metadata={"epoch_num": e}, time_ms=t)
        t += 200_000 + rng.randrange(3000)
        run.event(key="epoch_stop", value=e, metadata={"epoch_num": e}, time_ms=t)
        if (e - 3) % 4 == 0 or e >= 33:
            run.start(key="eval_start", value=e, metadata={"epoch_num": e}, time_ms=t)
            t += 16_700
            run.event(key="eval_accuracy", value=curve[e], metadata={"epoch_num": e}, time_ms=t)
            run.event(key="eval_stop", value=e, metadata={"epoch_num": e}, time_ms=t)
            if curve[e] >= 0.759:
                status = "success"
                break
    run.event(key="run_stop", value=None, metadata={"status": status}, time_ms=t)
    lines = list(cap_init.lines)
    for i, line in enumerate(cap_run.lines):
        if i % 7 == 3:
            # A progress line the MLLOG line was written into the middle of.
            lines.append(f"  {i:4d}  240.12 ms run, 1.2 ms python, 3{line}")
        else:
            lines.append(line)
            lines.append(f"  {i:4d}  241.{i % 100:02d} ms run, 0.9 ms python, 12.1 ms fetch data, 2.31 loss")
    if truncate:
        # A killed run: the last line is cut in the middle.
        lines = lines[:-12]
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    power = power_log(rng, t_run_start - 500, t + 500)
    return lines, power


def power_log(rng, start, stop):
    log, cap = new_logger()
    log.start(key="power_measurement_start", value=None, metadata={"host": "node_0"}, time_ms=start)
    log.event(key="conversion_eff", value=0.94, metadata={"measurement_type": "AC"}, time_ms=start)
    t = start
    while t + 2000 < stop:
        t += 2000 + rng.randrange(-20, 20)
        log.event(key="power_reading", value=2800.0 + 200 * rng.random(), metadata={"host": "node_0"}, time_ms=t)
    log.end(key="power_measurement_stop", value=None, metadata={"host": "node_0"}, time_ms=stop)
    return cap.lines


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_org(out, style, org, system, division, runs, power=None):
    base = os.path.join(out, style, org)
    os.makedirs(os.path.join(base, "systems"), exist_ok=True)
    with open(os.path.join(base, "systems", system + ".json"), "w") as f:
        json.dump(system_desc(org, system, division), f, indent=2)
    for i, lines in enumerate(runs):
        write(os.path.join(base, "results", system, "resnet", f"result_{i}.txt"), lines)
    for i, lines in enumerate(power or []):
        write(os.path.join(base, "results", system, "resnet", "power", f"result_{i}", "node_0.txt"), lines)


def generate(out):
    rng = random.Random(4)
    write_org(out, "mxnet", "nvidia", "dgx_like", "closed",
              [mxnet_run(rng, s, c, "nvidia", "dgx_like") for s, c in
               [(11, 34), (12, 36), (13, None), (14, 35), (15, 36)]])
    write_org(out, "pytorch", "torchers", "torchbox", "open",
              [pytorch_run(rng, s, c, "torchers", "torchbox") for s, c in
               [(21, 40), (22, 38), (23, 41), (24, 39), (25, 42)]])
    runs = [tinygrad_run(rng, s, c, "tinycorp", "tinybox_green", truncate=(s == 33)) for s, c in
            [(31, 35), (32, 35), (33, 36), (34, 34), (35, 35)]]
    write_org(out, "tinygrad", "tinycorp", "tinybox_green", "closed",
              [r[0] for r in runs], power=[r[1] for r in runs])
    write_org(out, "short", "nvidia", "three_runs", "closed",
              [mxnet_run(rng, s, c, "nvidia", "three_runs") for s, c in [(41, 34), (42, 36), (43, 35)]])
    write_org(out, "failing", "nvidia", "two_dnf", "closed",
              [mxnet_run(rng, s, c, "nvidia", "two_dnf") for s, c in
               [(51, 34), (52, None), (53, None), (54, 35), (55, 36)]])


def summarize(org):
    from mlperf_logging.result_summarizer import result_summarizer as rs
    scores = {}
    with contextlib.redirect_stdout(sys.stderr):
        # The first pass may write scaling.json (the RCP checker), which the second reads.
        rs.summarize_results(org, "training", RULESET)
        strong, _, detailed, _ = rs.summarize_results(org, "training", RULESET)
    for _, row in strong.iterrows():
        value = row["resnet"]
        scores[row["system"]] = {
            "time_to_train_min": None if value is None or value != value else float(value)}
    for _, row in detailed.iterrows():
        energy = row.get("resnet:Energy")
        if energy is not None and energy == energy:
            scores[row["system"]]["energy_j"] = float(energy)
    print(json.dumps(scores))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("generate", "summarize"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    {"generate": generate, "summarize": summarize}[sys.argv[1]](sys.argv[2])
