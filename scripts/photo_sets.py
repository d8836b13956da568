"""Writes small image sets made of real scans and photographs, as JPEG folders in the
ImageNet layout (ROOT/train/<class>/*.JPEG, ROOT/val/<class>/*.JPEG), for training
tests that must not run on generated images.

    photo_sets.py digits  ROOT [--size N]   scikit-learn's handwritten digits: 1,797
                                            real 8x8 scans, 10 classes, 20 % held out
    photo_sets.py scenes  ROOT [--size N]   patches of scikit-image's and scikit-learn's
        [--classes K] [--per-class P]       photographs, one photograph a class; the
                                            validation patches come from blocks of the
                                            photograph no training patch overlaps

The sets are the same on every run: the split and the patches are drawn with fixed
seeds.
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image

# Photographs (and scans of real things) that scikit-image and scikit-learn ship inside
# their packages, in a fixed order: a class is one photograph.
PHOTOGRAPHS = [
    ("skimage", "astronaut.png"),
    ("skimage", "chelsea.png"),
    ("skimage", "coffee.png"),
    ("skimage", "rocket.jpg"),
    ("skimage", "hubble_deep_field.jpg"),
    ("skimage", "retina.jpg"),
    ("sklearn", "china.jpg"),
    ("sklearn", "flower.jpg"),
    ("skimage", "motorcycle_left.png"),
    ("skimage", "ihc.png"),
    ("skimage", "brick.png"),
    ("skimage", "grass.png"),
    ("skimage", "gravel.png"),
    ("skimage", "coins.png"),
    ("skimage", "camera.png"),
    ("skimage", "moon.png"),
    ("skimage", "page.png"),
    ("skimage", "text.png"),
    ("skimage", "cell.png"),
    ("skimage", "microaneurysms.png"),
]

VAL_SHARE = 0.2


def save(image, path):
    image.convert("RGB").save(path, "JPEG", quality=92)


def digits(root, size):
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(20_260_000).permutation(len(data.target))
    val_count = int(round(len(order) * VAL_SHARE))
    for rank, index in enumerate(order):
        split = "val" if rank < val_count else "train"
        label = int(data.target[index])
        folder = os.path.join(root, split, f"digit{label}")
        os.makedirs(folder, exist_ok=True)
        # The scans are 0..16 ink on white paper.
        pixels = (255 - data.images[index] * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
        image = Image.fromarray(pixels, "L").resize((size, size), Image.BICUBIC)
        save(image, os.path.join(folder, f"digit_{index:04d}.JPEG"))


def photograph(package, name):
    if package == "skimage":
        import skimage

        folder = os.path.join(os.path.dirname(skimage.__file__), "data")
    else:
        import sklearn.datasets

        folder = os.path.join(os.path.dirname(sklearn.datasets.__file__), "images")
    return Image.open(os.path.join(folder, name)).convert("RGB")


GRID = 4
VAL_BLOCKS = 3


def patches(image, count, blocks, rng, out_size):
    """`count` square patches, each of half to all of a block's side and wholly inside
    one of `blocks` (cells of a GRID x GRID division of the photograph)."""
    width, height = image.size
    block_w, block_h = width // GRID, height // GRID
    block_side = min(block_w, block_h)
    for n in range(count):
        row, column = blocks[n % len(blocks)]
        side = int(rng.uniform(0.5, 1.0) * block_side)
        x = column * block_w + int(rng.integers(0, block_w - side + 1))
        y = row * block_h + int(rng.integers(0, block_h - side + 1))
        yield image.crop((x, y, x + side, y + side)).resize((out_size, out_size), Image.BICUBIC)


def scenes(root, size, classes, per_class):
    if not 2 <= classes <= len(PHOTOGRAPHS):
        sys.exit(f"photo_sets: --classes must be 2 to {len(PHOTOGRAPHS)}")
    rng = np.random.default_rng(20_260_001)
    val_count = max(1, int(round(per_class * VAL_SHARE)))
    for package, name in PHOTOGRAPHS[:classes]:
        image = photograph(package, name)
        label = os.path.splitext(name)[0]
        # Each photograph is cut into blocks, a few of them kept for validation: no
        # validation pixel was seen in training, and both splits cover the whole scene.
        blocks = [(r, c) for r in range(GRID) for c in range(GRID)]
        order = rng.permutation(len(blocks))
        val_blocks = [blocks[i] for i in order[:VAL_BLOCKS]]
        train_blocks = [blocks[i] for i in order[VAL_BLOCKS:]]
        for split, count, chosen in (
            ("train", per_class - val_count, train_blocks),
            ("val", val_count, val_blocks),
        ):
            folder = os.path.join(root, split, label)
            os.makedirs(folder, exist_ok=True)
            for n, patch in enumerate(patches(image, count, chosen, rng, size)):
                save(patch, os.path.join(folder, f"{label}_{n:04d}.JPEG"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", choices=["digits", "scenes"])
    parser.add_argument("root")
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument("--classes", type=int, default=12)
    parser.add_argument("--per-class", type=int, default=100)
    args = parser.parse_args()
    if os.path.exists(args.root) and os.listdir(args.root):
        sys.exit(f"photo_sets: {args.root} is not empty")
    if args.set == "digits":
        digits(args.root, args.size)
    else:
        scenes(args.root, args.size, args.classes, args.per_class)


if __name__ == "__main__":
    main()
