#!/usr/bin/python3
"""Makes an ImageNet-style folder of real photographs for tests and benchmarks.

The photographs are the samples that Debian's python3-sklearn and
python3-skimage ship (china, flower, rocket, coffee, chelsea, astronaut, ...):
each becomes one class, whose images are random crops of it resized to about
500 x 375 (ImageNet's typical size, landscape or portrait) and saved as JPEG at
quality 75..95 with 4:2:0 or 4:4:4 chroma, a few of them greyscale, CMYK,
progressive or PNG. With --bad, a class also gets a truncated JPEG, a JPEG
with an impossible frame header and a text file named .jpg.
Deterministic for a given --seed (the same PIL/libjpeg gives the same bytes).

    /usr/bin/python3 tools/image_data/make_image_folder.py OUT --classes 4 --per-class 16
    /usr/bin/python3 tools/image_data/make_image_folder.py OUT --split   # OUT/train, OUT/val
"""
import argparse
import io
import os
import random

from PIL import Image

SKLEARN = "/usr/lib/python3/dist-packages/sklearn/datasets/images"
SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
# Colour photographs first: the first classes are the ones most runs use.
SOURCES = [
    (SKLEARN, "china.jpg"), (SKLEARN, "flower.jpg"), (SKIMAGE, "rocket.jpg"),
    (SKIMAGE, "coffee.png"), (SKIMAGE, "chelsea.png"), (SKIMAGE, "astronaut.png"),
    (SKIMAGE, "motorcycle_left.png"), (SKIMAGE, "hubble_deep_field.jpg"),
    (SKIMAGE, "retina.jpg"), (SKIMAGE, "ihc.png"), (SKIMAGE, "camera.png"),
    (SKIMAGE, "coins.png"), (SKIMAGE, "moon.png"), (SKIMAGE, "brick.png"),
]


def source_images():
    out = []
    for folder, name in SOURCES:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            out.append((os.path.splitext(name)[0], Image.open(path).convert("RGB")))
    if not out:
        raise SystemExit("no sample photographs found: install python3-sklearn and python3-skimage")
    return out


def random_photo(src, rng, target=(500, 375)):
    """A random crop of src resized to about target (either orientation)."""
    tw, th = target
    if rng.random() < 0.25:
        tw, th = th, tw
    tw = int(tw * rng.uniform(0.85, 1.05))
    th = int(th * rng.uniform(0.85, 1.05))
    W, H = src.size
    frac = rng.uniform(0.45, 1.0)
    cw = max(16, min(W, int(W * frac)))
    ch = max(16, min(H, int(cw * th / tw)))
    x = rng.randint(0, W - cw)
    y = rng.randint(0, H - ch)
    return src.crop((x, y, x + cw, y + ch)).resize((tw, th), Image.BICUBIC)


def encode(img, kind, quality, subsampling):
    buf = io.BytesIO()
    if kind == "png":
        img.save(buf, "PNG")
    elif kind == "gray":
        img.convert("L").save(buf, "JPEG", quality=quality)
    elif kind == "cmyk":
        img.convert("CMYK").save(buf, "JPEG", quality=quality)
    else:
        img.save(buf, "JPEG", quality=quality, subsampling=subsampling,
                 progressive=(kind == "progressive"))
    return buf.getvalue()


def pick_kind(rng):
    r = rng.random()
    if r < 0.06:
        return "gray"
    if r < 0.10:
        return "cmyk"
    if r < 0.14:
        return "progressive"
    if r < 0.17:
        return "png"
    return "rgb"


def corrupt_frame_header(jpeg):
    """The JPEG with an impossible sample precision (3 bits) in its frame header."""
    for sof in (b"\xff\xc0", b"\xff\xc1", b"\xff\xc2"):
        at = jpeg.find(sof)
        if at >= 0:
            return jpeg[: at + 4] + b"\x03" + jpeg[at + 5:]
    raise ValueError("no frame header")


def bad_files(good_jpeg):
    return {
        "truncated.jpg": good_jpeg[: len(good_jpeg) // 2],
        "corrupt.jpg": corrupt_frame_header(good_jpeg),
        "not_an_image.jpg": b"this is not a JPEG file\n" * 10,
    }


def write_class(folder, src, count, rng, bad):
    os.makedirs(folder, exist_ok=True)
    first_jpeg = None
    for i in range(count):
        kind = pick_kind(rng)
        data = encode(random_photo(src, rng), kind, rng.randint(75, 95),
                      rng.choice([0, 0, 2]))  # 4:4:4 or 4:2:0
        ext = "png" if kind == "png" else "jpg"
        with open(os.path.join(folder, f"{i:05d}.{ext}"), "wb") as f:
            f.write(data)
        if first_jpeg is None and ext == "jpg":
            first_jpeg = data
    if bad and first_jpeg is not None:
        for name, data in bad_files(first_jpeg).items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--per-class", type=int, default=16)
    p.add_argument("--val-per-class", type=int, default=4, help="with --split")
    p.add_argument("--split", action="store_true", help="write OUT/train and OUT/val")
    p.add_argument("--bad", action="store_true", help="add three bad files to the first class")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    sources = source_images()[: a.classes]
    parts = [("train", a.per_class), ("val", a.val_per_class)] if a.split else [("", a.per_class)]
    for part, count in parts:
        for c, (name, src) in enumerate(sources):
            write_class(os.path.join(a.out, part, f"{c:02d}_{name}"), src, count, rng,
                        a.bad and c == 0 and part != "val")
    print(f"make_image_folder: {len(sources)} classes in {a.out}")


if __name__ == "__main__":
    main()
