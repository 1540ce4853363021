#!/usr/bin/python3
"""Writes the golden files of tests/data/image_folder_test.cpp: a few
photographs and torchvision 0.14's transforms of them on PIL images.

    /usr/bin/python3 tests/golden/make_image_golden.py

Inputs (committed, tests/golden/images/): small crops of Debian's sample
photographs (tools/image_data/make_image_folder.py; 90 to 320 pixels a side) as JPEG 4:2:0 q75, JPEG
4:4:4 q95 (portrait), greyscale JPEG, CMYK JPEG, progressive JPEG, RGB PNG,
RGBA PNG and palette PNG.
Outputs (image_transforms.safetensors): for each image
  <file>/train<k>/plan    i64 [x, y, w, h, flip]: a box drawn by torchvision's
                          RandomResizedCrop.get_params and a flip
  <file>/train<k>/pixels  u8 [48, 48, 3]: F.resized_crop(img, y, x, h, w, 48,
                          BILINEAR), then F.hflip when flip
  <file>/eval/pixels      u8 [48, 48, 3]: Resize(56) + CenterCrop(48)
and for the first image the same at 224 (train3: a 224 crop; eval224:
Resize(256) + CenterCrop(224)). Pixels are np.asarray(PIL image), HWC.
"""
import importlib.util
import io
import os
import random

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
spec = importlib.util.spec_from_file_location(
    "make_image_folder", os.path.join(ROOT, "tools/image_data/make_image_folder.py"))
mif = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mif)

SIZE = 48


def inputs(rng):
    """name -> encoded bytes."""
    srcs = dict(mif.source_images())
    photo = lambda name, size: mif.random_photo(srcs[name], rng, size)
    out = {}
    buf = lambda: io.BytesIO()
    def save(name, img, fmt, **kw):
        b = buf()
        img.save(b, fmt, **kw)
        out[name] = b.getvalue()
    save("rgb420_q75.jpg", photo("china", (320, 240)), "JPEG", quality=75, subsampling=2)
    save("rgb444_q95.jpg", photo("flower", (240, 320)), "JPEG", quality=95, subsampling=0)
    save("gray.jpg", photo("rocket", (320, 240)).convert("L"), "JPEG", quality=85)
    save("cmyk.jpg", photo("coffee", (200, 150)).convert("CMYK"), "JPEG", quality=90)
    save("progressive.jpg", photo("chelsea", (320, 240)), "JPEG", quality=80, progressive=True)
    save("rgb.png", photo("astronaut", (120, 90)), "PNG")
    save("rgba.png", photo("astronaut", (90, 120)).convert("RGBA"), "PNG")
    save("palette.png", photo("coffee", (120, 90)).convert("P", palette=Image.ADAPTIVE), "PNG")
    return out


def main():
    assert torchvision.__version__.startswith("0.14"), torchvision.__version__
    rng = random.Random(27)
    torch.manual_seed(27)
    tensors = {}
    for name, data in inputs(rng).items():
        with open(os.path.join(HERE, "images", name), "wb") as f:
            f.write(data)
        img = Image.open(io.BytesIO(data)).convert("RGB")  # torchvision's pil_loader
        crops = [(k, SIZE) for k in range(3)] + ([(3, 224)] if name == "rgb420_q75.jpg" else [])
        for k, size in crops:
            y, x, h, w = T.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3))
            flip = k % 2
            out = F.resized_crop(img, y, x, h, w, [size, size], T.InterpolationMode.BILINEAR)
            if flip:
                out = F.hflip(out)
            tensors[f"{name}/train{k}/plan"] = torch.tensor([x, y, w, h, flip], dtype=torch.int64)
            tensors[f"{name}/train{k}/pixels"] = torch.from_numpy(np.asarray(out).copy())
        evals = [("eval", 56, SIZE)] + ([("eval224", 256, 224)] if name == "rgb420_q75.jpg" else [])
        for key, resize, size in evals:
            out = T.Compose([T.Resize(resize), T.CenterCrop(size)])(img)
            tensors[f"{name}/{key}/pixels"] = torch.from_numpy(np.asarray(out).copy())
    write_safetensors(os.path.join(HERE, "image_transforms.safetensors"), tensors)
    print(f"wrote {len(tensors)} tensors")


if __name__ == "__main__":
    main()
