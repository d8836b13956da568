#!/usr/bin/env python3
"""PyTorch CPU training throughput, the reference figure beside `tinyperf bench train`.

Each model runs in its own subprocess so that its peak RSS is its own: fp32,
channels_last, oneDNN on, torch.set_num_threads(THREADS), plain momentum SGD, label-
smoothed cross-entropy on a fixed random batch. img/s comes from the median step time
after the warm-up steps; the load average before and after is printed because other
work on the machine lowers the figure.

    /tmp/torchvenv/bin/python scripts/bench-torch.py                       # both models
    /tmp/torchvenv/bin/python scripts/bench-torch.py --model resnet50 --batch 32 --json

Defaults: ResNet-50 at batch 32, 224x224; ResNet-20 (CIFAR, option-B shortcuts) at
batch 128, 32x32; 2 warm-up steps then 5 timed steps; 2 threads.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

DEFAULTS = {"resnet50": (32, 224, 1000), "resnet20": (128, 32, 10)}


def build(model):
    import torchvision

    if model == "resnet50":
        return torchvision.models.resnet50(weights=None)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_reference import ResNet20

    return ResNet20(10)


def run_one(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = True
    batch, size, classes = DEFAULTS[args.model]
    batch = args.batch or batch
    size = args.image_size or size
    torch.manual_seed(0)
    model = build(args.model).to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(batch, 3, size, size).to(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,))
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
    median = statistics.median(times)
    return {
        "model": args.model,
        "batch": batch,
        "image_size": size,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_ms_median": median * 1e3,
        "step_ms_all": [t * 1e3 for t in times],
        "img_per_s": batch / median,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_version": torch.__version__,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["resnet50", "resnet20", "all"], default="all")
    parser.add_argument("--batch", type=int, default=0, help="batch size (default per model)")
    parser.add_argument("--image-size", type=int, default=0, help="image side (default per model)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="one JSON object per model on stdout")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 0 or args.image_size < 0:
        parser.error("steps and threads must be at least 1; warmup, batch and image size not negative")

    if args.in_process:
        print(json.dumps(run_one(args)))
        return

    models = ["resnet50", "resnet20"] if args.model == "all" else [args.model]
    for model in models:
        load_before = os.getloadavg()[0]
        cmd = [sys.executable, os.path.abspath(__file__), "--in-process", "--model", model,
               "--batch", str(args.batch), "--image-size", str(args.image_size),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["loadavg_1m_before"] = load_before
        result["loadavg_1m_after"] = os.getloadavg()[0]
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{model}: batch {result['batch']} {result['image_size']}x{result['image_size']}, "
                  f"{result['threads']} threads: {result['img_per_s']:.2f} img/s "
                  f"(median step {result['step_ms_median']:.1f} ms of {result['steps']}), "
                  f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB, "
                  f"load {result['loadavg_1m_before']:.2f} -> {result['loadavg_1m_after']:.2f}, "
                  f"torch {result['torch_version']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
