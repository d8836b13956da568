#!/usr/bin/env python3
"""Reference values for tinyperf's engine, computed once with PyTorch on the CPU.

For each model (torchvision's ResNet-50 v1.5, a CIFAR-style ResNet-20, a narrow
ResNet-18) this sets every parameter from tinyperf's own initialisers (src/engine/rng.rs
and src/engine/init.rs, reimplemented here bit for bit with numpy), runs one training-mode
forward and backward on a fixed batch of 2 with label-smoothed cross-entropy, and writes
the loss, logits, gradient norms and batch-norm running statistics to
tests/fixtures/torch/<model>_reference.json, once in float32 and once in float64 (the
difference between the two says how much float32 rounding moves each figure).

Conventions the Rust side must follow to reproduce the run:
  * Parameter `stream` = index of the parameter in `model.named_parameters()` order;
    all tensors use the same `seed`.
  * Conv weights OIHW: truncated He normal, std sqrt(2/fan_in)/0.8796..., |z| <= 2 by
    rejection (element i of n tries normal indices i, i+n, i+2n, ...). FC weight
    N(0, 0.01^2); FC bias 0; BN gamma 1, beta 0; running mean 0, running var 1.
  * Input: standard normals as float32 from (seed, INPUT_STREAM), element index in NCHW
    order ((n*C + c)*H + h)*W + w. The NHWC twin is the same values reordered
    (init::nchw_to_nhwc).
  * BN: training mode (batch statistics, biased variance to normalise), eps 1e-5,
    momentum 0.1; running_var is updated with the unbiased batch variance (as PyTorch
    and the reference both do).
  * Loss: mean over the batch of cross-entropy with label smoothing 0.1:
    (1 - 0.1) * nll(label) + 0.1 * mean_over_classes(-log_softmax).
  * ResNet-20 shortcut: option B (1x1 conv with stride + BN where the shape changes,
    identity elsewhere).

Regenerate (a few minutes on 2 cores; torch, torchvision and numpy from PyPI):
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch torchvision numpy
    /tmp/torchvenv/bin/python scripts/torch_reference.py [--out-dir DIR] [--models resnet50,resnet20,resnet18n]
"""

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
STREAM_GAMMA = 0xD1B54A32D192ED03
UNIT = 1.0 / float(1 << 53)
TRUNCATED_NORMAL_STD = 0.87962566103423978
MAX_REJECTION_ROUNDS = 32
FC_WEIGHT_STD = 0.01

SEED = 42
INPUT_STREAM = 1_000_000
LABEL_SMOOTHING = 0.1
SAMPLE_COUNT = 8


# ---- counter generator (twin of src/engine/rng.rs) -------------------------------------

def mix64_int(z):
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def stream_key(seed, stream):
    base = mix64_int((seed + GOLDEN) & MASK64)
    return mix64_int((base + ((stream + 1) * STREAM_GAMMA)) & MASK64)


def bits(key, index):
    """The 64 random bits at each of `index` (a uint64 array)."""
    with np.errstate(over="ignore"):
        return mix64(np.uint64(key) + (index + np.uint64(1)) * np.uint64(GOLDEN))


def uniform(key, index):
    return (bits(key, index) >> np.uint64(11)).astype(np.float64) * UNIT


def normal(key, index):
    """Box-Muller, cosine branch, with glibc's log and cos (what Rust's f64 calls)."""
    first = index * np.uint64(2)
    u1 = ((bits(key, first) >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * UNIT
    u2 = uniform(key, first + np.uint64(1))
    logs = np.fromiter(map(math.log, u1.tolist()), dtype=np.float64, count=u1.size)
    radius = np.sqrt(-2.0 * logs)
    angles = math.tau * u2
    cosines = np.fromiter(map(math.cos, angles.tolist()), dtype=np.float64, count=u2.size)
    return radius * cosines


# ---- initialisers (twin of src/engine/init.rs) -----------------------------------------

def standard_normal(seed, stream, n):
    return normal(stream_key(seed, stream), np.arange(n, dtype=np.uint64)).astype(np.float32)


def truncated_normal(seed, stream, n, std):
    key = stream_key(seed, stream)
    out = np.zeros(n, dtype=np.float32)
    pending = np.arange(n, dtype=np.uint64)
    for rnd in range(MAX_REJECTION_ROUNDS):
        if pending.size == 0:
            break
        z = normal(key, pending + np.uint64(rnd * n))
        ok = np.abs(z) <= 2.0
        out[pending[ok].astype(np.int64)] = (z[ok] * std).astype(np.float32)
        pending = pending[~ok]
    return out


def conv_weight(seed, stream, cout, cin, kh, kw):
    fan_in = cin * kh * kw
    std = math.sqrt(2.0 / fan_in) / TRUNCATED_NORMAL_STD
    return truncated_normal(seed, stream, cout * fan_in, std).reshape(cout, cin, kh, kw)


def linear_weight(seed, stream, out_f, in_f):
    z = normal(stream_key(seed, stream), np.arange(out_f * in_f, dtype=np.uint64))
    return (z * FC_WEIGHT_STD).astype(np.float32).reshape(out_f, in_f)


def checksum(values):
    """Sum of bits(v_i) * (2i + 1) in wrapping uint64 (twin of init::checksum)."""
    b = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    weights = np.arange(b.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(b * weights, dtype=np.uint64))


def first_bits(values):
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)[:SAMPLE_COUNT]
    return [int(x) for x in flat.view(np.uint32)]


def param_kind(name):
    module, leaf = name.rsplit(".", 1)
    last = module.rsplit(".", 1)[-1]
    if last.startswith("bn") or module.endswith("downsample.1"):
        return "BnGamma" if leaf == "weight" else "BnBeta"
    if last.startswith("conv") or module.endswith("downsample.0"):
        return "ConvWeight"
    if last == "fc":
        return "FcWeight" if leaf == "weight" else "FcBias"
    raise ValueError(f"unknown parameter {name}")


def init_values(kind, shape, seed, stream):
    if kind == "ConvWeight":
        return conv_weight(seed, stream, *shape)
    if kind == "FcWeight":
        return linear_weight(seed, stream, *shape)
    if kind in ("FcBias", "BnBeta"):
        return np.zeros(shape, dtype=np.float32)
    if kind == "BnGamma":
        return np.ones(shape, dtype=np.float32)
    raise ValueError(kind)


# ---- small models -----------------------------------------------------------------------

class BasicBlock(nn.Module):
    """Two 3x3 convs; option-B shortcut (1x1 conv + BN) where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


def make_stage(cin, cout, blocks, stride):
    layers = [BasicBlock(cin, cout, stride)]
    layers += [BasicBlock(cout, cout, 1) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


class ResNet20(nn.Module):
    """CIFAR ResNet-20: 3x3 stem of 16, stages of 3 basic blocks at 16/32/64 channels."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = make_stage(16, 16, 3, 1)
        self.layer2 = make_stage(16, 32, 3, 2)
        self.layer3 = make_stage(32, 64, 3, 2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class NarrowResNet18(nn.Module):
    """ResNet-18 layout (7x7/2 stem, 3x3/2 max pool, [2,2,2,2] basic blocks) at widths
    w, 2w, 4w, 8w."""

    def __init__(self, width=16, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = make_stage(width, width, 2, 1)
        self.layer2 = make_stage(width, 2 * width, 2, 2)
        self.layer3 = make_stage(2 * width, 4 * width, 2, 2)
        self.layer4 = make_stage(4 * width, 8 * width, 2, 2)
        self.fc = nn.Linear(8 * width, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {
    "resnet50": dict(
        build=lambda: torchvision.models.resnet50(weights=None, num_classes=1000),
        image=224, classes=1000, labels=[7, 421],
        architecture="torchvision resnet50 (v1.5: stride on the 3x3 conv), no conv bias, "
                     "BN eps 1e-5 momentum 0.1, 1000 classes",
    ),
    "resnet20": dict(
        build=lambda: ResNet20(10), image=32, classes=10, labels=[3, 8],
        architecture="CIFAR ResNet-20: conv3x3(3->16)/1 + BN + ReLU; 3 stages x 3 basic blocks "
                     "at 16/32/64 (stride 2 on the first block of stages 2 and 3); option-B "
                     "shortcut: conv1x1/stride + BN where the shape changes; global average "
                     "pool; fc 64->10",
    ),
    "resnet18n": dict(
        build=lambda: NarrowResNet18(16, 10), image=64, classes=10, labels=[1, 6],
        architecture="narrow ResNet-18: conv7x7(3->16)/2 pad 3 + BN + ReLU, maxpool 3x3/2 "
                     "pad 1; [2,2,2,2] basic blocks at 16/32/64/128 (stride 2 on the first "
                     "block of stages 2-4); option-B shortcut (conv1x1/stride + BN) where "
                     "the shape changes; global average pool; fc 128->10",
    ),
}


def lars_one_step(w, g, lr, wd, tcoef, momentum):
    """The reference LARS step from a zero momentum buffer, in float64."""
    wn, gn = float(np.linalg.norm(w)), float(np.linalg.norm(g))
    trust = tcoef * wn / (gn + wd * wn) if (tcoef != 0 and wn > 0 and gn > 0) else 1.0
    step = (g + wd * w) * trust * lr
    return w - step, trust


def run_model(name, spec, dtype):
    torch.manual_seed(0)
    model = spec["build"]()
    params = []
    with torch.no_grad():
        for stream, (pname, p) in enumerate(model.named_parameters()):
            kind = param_kind(pname)
            values = init_values(kind, tuple(p.shape), SEED, stream)
            p.copy_(torch.from_numpy(values))
            params.append((pname, stream, kind, values))
    model = model.to(dtype).train()
    shape = (2, 3, spec["image"], spec["image"])
    x_np = standard_normal(SEED, INPUT_STREAM, int(np.prod(shape))).reshape(shape)
    x = torch.from_numpy(x_np).to(dtype)
    labels = torch.tensor(spec["labels"], dtype=torch.long)
    logits = model(x)
    loss = F.cross_entropy(logits, labels, label_smoothing=LABEL_SMOOTHING)
    loss.backward()

    named = dict(model.named_parameters())
    grad_norms = {n: float(named[n].grad.double().norm()) for n, _, _, _ in params}
    running = {}
    for mname, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            running[mname] = {
                "mean_norm": float(m.running_mean.double().norm()),
                "var_norm": float(m.running_var.double().norm()),
                "mean_first": [float(v) for v in m.running_mean[:4].double()],
                "var_first": [float(v) for v in m.running_var[:4].double()],
            }
    lg = logits.detach().double()
    # One optimizer step of the recipe (LARS on weights, SGD on the skip list) at this LR.
    lr, wd, tcoef = 1.0, 2e-4, 0.001
    after = {}
    for pname, _, kind, values in params:
        w = values.astype(np.float64)
        g = named[pname].grad.double().numpy()
        skip = kind in ("BnGamma", "BnBeta", "FcBias")
        new_w, trust = lars_one_step(w, g, lr, 0.0 if skip else wd, 0.0 if skip else tcoef, 0.9)
        after[pname] = {"trust_ratio": trust, "param_norm": float(np.linalg.norm(new_w))}
    result = {
        "loss": float(loss.detach()),
        "logits_first10": [[float(v) for v in row[:10]] for row in lg],
        "logits_at_labels": [float(lg[i, c]) for i, c in enumerate(spec["labels"])],
        "logits_norm": float(lg.norm()),
        "grad_norms": grad_norms,
        "running_stats": running,
        "one_step": {"lr": lr, "weight_decay": wd, "trust_coefficient": tcoef, "momentum": 0.9,
                     "from_zero_momentum": True, "params": after},
    }
    meta = {
        "architecture": spec["architecture"],
        "num_classes": spec["classes"],
        "labels": spec["labels"],
        "input": {
            "shape_nchw": list(shape), "seed": SEED, "stream": INPUT_STREAM,
            "distribution": "standard normal float32 (init::standard_normal), NCHW element order",
            "checksum": checksum(x_np), "first_bits": first_bits(x_np),
        },
        "params": [
            {"name": n, "stream": s, "kind": k, "shape": list(v.shape),
             "checksum": checksum(v), "first_bits": first_bits(v)}
            for n, s, k, v in params
        ],
    }
    return meta, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out-dir", default=os.path.join(root, "tests/fixtures/torch"))
    parser.add_argument("--models", default="resnet50,resnet20,resnet18n")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(args.out_dir, exist_ok=True)

    key = stream_key(SEED, 0)
    idx = np.arange(SAMPLE_COUNT, dtype=np.uint64)
    header = {
        "generator": "scripts/torch_reference.py",
        "regenerate": "/tmp/torchvenv/bin/python scripts/torch_reference.py (torch, torchvision, numpy from PyPI)",
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "seed": SEED,
        "label_smoothing": LABEL_SMOOTHING,
        "loss_reduction": "mean over the batch",
        "conventions": [
            "params[i].stream = index in model.named_parameters(); every tensor uses `seed`",
            "first_bits: f32 bit patterns of the first values in PyTorch order (OIHW, [out, in])",
            "checksum: sum of f32 bits(v_i) * (2i+1), wrapping u64 (init::checksum)",
            "input: init::standard_normal(seed, input.stream, N*C*H*W) in NCHW order",
            "BN in training mode, eps 1e-5, momentum 0.1, running stats start at mean 0, var 1",
            "grad_norms: L2 norm of d(loss)/d(param) by state-dict name",
            "running_stats: after the one forward pass; running_var uses the unbiased batch variance",
            "one_step: one LARS step (skip list: SGD, no decay) from a zero momentum buffer at lr",
            "fp32 and fp64: the same run in float32 and float64; their gap shows float32 rounding",
        ],
        "rng_samples": {
            "seed": SEED, "stream": 0,
            "bits": [str(int(b)) for b in bits(key, idx)],
            "uniform": [float(u) for u in uniform(key, idx)],
            "normal": [float(z) for z in normal(key, idx)],
            # The doubles' IEEE bits, for exact comparison (decimal parsers may round).
            "uniform_f64_bits": [str(int(b)) for b in uniform(key, idx).view(np.uint64)],
            "normal_f64_bits": [str(int(b)) for b in normal(key, idx).view(np.uint64)],
        },
    }
    for name in args.models.split(","):
        spec = MODELS[name]
        t0 = time.time()
        meta, fp32 = run_model(name, spec, torch.float32)
        _, fp64 = run_model(name, spec, torch.float64)
        fixture = {**header, "model": name, **meta, "fp32": fp32, "fp64": fp64}
        out = os.path.join(args.out_dir, f"{name}_reference.json")
        with open(out, "w") as f:
            json.dump(fixture, f, indent=1)
            f.write("\n")
        print(f"{name}: loss fp32 {fp32['loss']:.7f} fp64 {fp64['loss']:.7f} ({time.time() - t0:.1f} s), "
              f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
