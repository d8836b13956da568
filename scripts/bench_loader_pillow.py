#!/usr/bin/env python3
"""Pillow doing what the tinyperf training loader does per image, on one thread:
open + decode a JPEG, random resized crop (torchvision's algorithm: scale 0.10-1.0,
ratio 3/4-4/3 log-uniform, 100 attempts, centre fallback), bilinear resize to SIZE,
horizontal flip with p = 0.5.

Usage: bench_loader_pillow.py DATASET_ROOT [--images N] [--size S] [--json]
It takes the same subset of DATASET_ROOT/train/ as `tinyperf dataset bench`
(every k-th file in class/file order).
"""
import argparse
import json
import math
import os
import random
import time

from PIL import Image


def train_files(root):
    train = os.path.join(root, "train")
    files = []
    for cls in sorted(d for d in os.listdir(train) if not d.startswith(".")):
        cdir = os.path.join(train, cls)
        if not os.path.isdir(cdir):
            continue
        names = sorted(
            n for n in os.listdir(cdir)
            if not n.startswith(".") and n.lower().rsplit(".", 1)[-1] in ("jpeg", "jpg")
        )
        files.extend(os.path.join(cdir, n) for n in names)
    return files


def subset(files, max_images):
    step = max(len(files) // max(max_images, 1), 1)
    if len(files) // step > max_images:
        step += 1
    return files[::step]


def rrc_params(width, height, rng, scale=(0.10, 1.0), ratio=(3 / 4, 4 / 3), attempts=100):
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(attempts):
        target_area = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    files = subset(train_files(args.root), args.images)
    rng = random.Random(0)

    def one(path):
        with Image.open(path) as im:
            im = im.convert("RGB")
            x, y, w, h = rrc_params(im.width, im.height, rng)
            out = im.crop((x, y, x + w, y + h)).resize((args.size, args.size), Image.BILINEAR)
            if rng.random() < 0.5:
                out = out.transpose(Image.FLIP_LEFT_RIGHT)
            return out

    for path in files[: min(len(files), 50)]:  # warm the page cache and the interpreter
        one(path)
    start = time.perf_counter()
    for path in files:
        one(path)
    elapsed = time.perf_counter() - start
    result = {
        "images": len(files),
        "image_size": args.size,
        "img_per_s_per_core": len(files) / elapsed,
        "pillow": Image.__version__,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"Pillow {result['pillow']}: {len(files)} images to {args.size}x{args.size}: "
              f"{result['img_per_s_per_core']:.1f} img/s per core")


if __name__ == "__main__":
    main()
