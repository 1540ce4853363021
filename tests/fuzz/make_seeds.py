#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
small valid inputs of each format, so the fuzzers start from the parsers'
good paths. Run from anywhere; rewrites the files it owns. Files named
regression_* are inputs that once crashed a target, committed by hand with
the fix so that every run replays them."""
import gzip
import io
import json
import os
import random
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def idx(type_code, dims, payload):
    return struct.pack(">BBBB", 0, 0, type_code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload


def manifest(sections, generators, metadata):
    def q(s):
        return json.dumps(s)
    s = "{\n"
    s += '  "format": "ddp.checkpoint",\n  "format_version": 1,\n'
    s += '  "generation": 3,\n  "epoch": 1,\n  "step": 120,\n'
    s += '  "generators": {' + ",".join(
        '\n    %s: {"seed": %d, "offset": %d}' % (q(n), a, b) for n, a, b in generators)
    s += "\n  },\n" if generators else "},\n"
    s += '  "metadata": {' + ",".join("\n    %s: %s" % (q(k), q(v)) for k, v in metadata)
    s += "\n  },\n" if metadata else "},\n"
    s += '  "sections": {' + ",".join(
        '\n    %s: {"file": %s, "bytes": %d, "crc32": "%08x", "tensors": %d}' % (q(n), q(f), b, c, t)
        for n, f, b, c, t in sections)
    s += "\n  },\n" if sections else "},\n"
    draft = s + '  "manifest_crc32": "00000000"\n}\n'
    return s + '  "manifest_crc32": "%08x"\n}\n' % (zlib.crc32(draft.encode()) & 0xffffffff)


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def field(b):
    return struct.pack("<I", len(b)) + b


put("json", "object", '{"a": [1, -2.5e3, true, false, null], "b": {"c": "\\u00e9\\n"}}')
put("json", "array", '[[[]], {}, "", 0, 1e-7]')
put("json", "safetensors_header", json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}))

put("safetensors", "two_tensors", safetensors(
    {"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), "step": ("I64", [], struct.pack("<q", 7))},
    {"epoch": "3"}))
put("safetensors", "bf16_empty", safetensors({"b": ("BF16", [0], b""), "h": ("F16", [1], b"\x00\x3c")}))

put("idx", "images_u8", idx(0x08, [2, 2, 2], bytes(range(8))))
put("idx", "labels_u8", idx(0x08, [3], b"\x01\x02\x03"))
put("idx", "f32", idx(0x0D, [2], struct.pack(">2f", 1.5, -2)))
put("idx", "gzip", gzip.compress(idx(0x08, [4], b"\x00\x01\x02\x03"), mtime=0))

put("cifar", "one_image", bytes([3]) + bytes(i % 256 for i in range(3072)))
put("cifar", "two_images_100", bytes([1, 42]) + bytes(3072) + bytes([2, 99]) + bytes(3072))

# record_file: 8 layout bytes (record, header, input offset, input length,
# dtype flags, label offset, label bytes, classes), then the file.
put("record_file", "u8_images", bytes([5, 2, 1, 4, 2, 0, 1, 10]) + b"HD" + bytes([3, 1, 2, 3, 4]) * 3)
put("record_file", "f32_no_label", bytes([8, 0, 0, 2, 1, 0xFF, 1, 0]) + struct.pack("<4f", 1, 2, 3, 4))

put("checkpoint_manifest", "full", manifest(
    [("model", "model.g3.safetensors", 1024, 0xdeadbeef, 12), ("optimizer", "optimizer.g3.safetensors", 2048, 1, 24)],
    [("cpu", 1234, 56)], [("epoch", "1"), ("note", "a \"quoted\" value")]))
put("checkpoint_manifest", "empty", manifest([], [], []))

put("http_request", "scrape", "GET /metrics HTTP/1.1\r\nHost: node01:9100\r\nAccept: text/plain\r\n\r\n")
put("http_request", "head_keepalive", "HEAD /metrics?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
put("http_request", "post_body", "POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody")

hello = frame(b"\x01" + field(b"") + struct.pack("<I", 1))
put("tcp_store", "session", hello
    + frame(b"\x02" + field(b"key") + field(b"value"))
    + frame(b"\x03" + field(b"key") + struct.pack("<q", 0))
    + frame(b"\x04" + field(b"n") + struct.pack("<q", 5))
    + frame(b"\x05" + field(b"key") + field(b"value") + field(b"new"))
    + frame(b"\x06" + struct.pack("<I", 2) + field(b"key") + field(b"n"))
    + frame(b"\x07" + struct.pack("<I", 1) + field(b"key") + struct.pack("<q", 0))
    + frame(b"\x08" + field(b"key"))
    + frame(b"\x09"))
put("tcp_store", "wrong_version", frame(b"\x01" + field(b"tok") + struct.pack("<I", 99)))


# ---- Images (image_decode, packed_images) -----------------------------------
# Tiny JPEGs made with PIL (python3-pil: run this script with the system's
# python3 if another one lacks it) and PNGs written by png() below, which
# covers what PIL cannot write (Adam7 interlacing, 16-bit colour).

def pixels(width, height, channels, seed, depth=8):
    """A smooth gradient with a little noise, so that JPEGs stay small."""
    rng = random.Random(seed)
    top = (1 << depth) - 1
    return [[min(top, max(0, (x * 7 + y * 5 + c * 60) * top // 400 + rng.randint(-top // 40, top // 40)))
             for x in range(width) for c in range(channels)] for y in range(height)]


def jpeg(mode, width, height, seed, **options):
    from PIL import Image  # only here: the other seeds need no PIL
    channels = {"L": 1, "RGB": 3, "CMYK": 4}[mode]
    rows = pixels(width, height, channels, seed)
    image = Image.frombytes(mode, (width, height), bytes(v for row in rows for v in row))
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def png(color_type, depth, width, height, seed, interlace=False, palette_size=0):
    """A PNG of colour type 0 (grey), 2 (RGB), 3 (palette), 4 (grey+alpha) or
    6 (RGBA), any bit depth the type allows, Adam7-interlaced on request."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    rows = pixels(width, height, channels, seed, depth)
    if color_type == 3:
        rows = [[v % palette_size for v in row] for row in rows]

    def pack(row):  # one row of samples, filter type 0
        if depth == 16:
            return b"\0" + b"".join(struct.pack(">H", v) for v in row)
        if depth == 8:
            return b"\0" + bytes(row)
        bits = "".join(format(v, "0%db" % depth) for v in row)
        bits += "0" * (-len(bits) % 8)
        return b"\0" + bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))

    def pixel_row(y, xs):
        return [v for x in xs for v in rows[y][x * channels:(x + 1) * channels]]

    if interlace:
        raw = b""
        for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                               (1, 0, 2, 2), (0, 1, 1, 2)):
            xs = range(x0, width, dx)
            if len(xs):
                raw += b"".join(pack(pixel_row(y, xs)) for y in range(y0, height, dy))
    else:
        raw = b"".join(pack(pixel_row(y, range(width))) for y in range(height))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0,
                                                           int(interlace)))
    if color_type == 3:
        out += chunk(b"PLTE", bytes((i * 40 + c * 90) % 256 for i in range(palette_size) for c in range(3)))
        out += chunk(b"tRNS", bytes(255 - 30 * i for i in range(min(palette_size, 4))))
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


images = {
    "jpeg_baseline": jpeg("RGB", 40, 36, 1, quality=60),
    "jpeg_progressive": jpeg("RGB", 36, 34, 2, quality=60, progressive=True),
    "jpeg_grey": jpeg("L", 37, 35, 3, quality=70),
    "jpeg_cmyk": jpeg("CMYK", 18, 17, 4, quality=50),
    "jpeg_444": jpeg("RGB", 20, 9, 5, quality=80, subsampling=0),
    "png_rgb": png(2, 8, 12, 11, 6),
    "png_palette": png(3, 4, 13, 9, 7, palette_size=10),
    "png_grey_alpha": png(4, 8, 10, 12, 8),
    "png_rgb16": png(2, 16, 9, 7, 9),
    "png_interlaced": png(2, 8, 11, 10, 10, interlace=True),
    "png_grey1": png(0, 1, 19, 5, 11),
}
for name, data in images.items():
    assert len(data) < 4096, (name, len(data))

# image_decode: 8 bytes choosing the decode (image_decode_fuzz.cpp), then
# the file: each image whole, and a DCT-scaled or training crop of it.
for name, data in images.items():
    put("image_decode", name + "_whole", bytes([0, 15, 0, 0, 255, 255, 0, 0]) + data)
    put("image_decode", name + "_crop", bytes([0x07 if name.startswith("jpeg") else 0x01,
                                               7, 64, 32, 160, 200, 0x35, 0x21]) + data)


def shard(records, classes, number=0, shards=1):
    """A packed image shard (Note [Packed image format] in
    include/ddp/data/packed_images.h) of (jpeg bytes, label, width, height)."""
    body, table = b"", b""
    for i, (data, label, width, height) in enumerate(records):
        offset = 64 + len(body)
        body += data + b"\0" * (-len(data) % 8)
        table += struct.pack("<QIIqiHH", offset, len(data), zlib.crc32(data), 10 + i, label, width, height)
    header = b"DDPIMG1\n" + struct.pack("<IIIIQQII", 1, number, shards, classes, len(records), 64 + len(body),
                                        500, 90) + bytes(12)
    header += struct.pack("<I", zlib.crc32(header))
    return header + body + table + struct.pack("<I", zlib.crc32(table)) + b"DDPEND1\n"


# packed_images: 1 byte choosing the checksum fixes and policy
# (packed_images_fuzz.cpp), then the shard.
put("packed_images", "two_records", b"\0" + shard(
    [(images["jpeg_baseline"], 1, 40, 36), (images["jpeg_grey"], 0, 37, 35)], 2))
put("packed_images", "png_record_skip", b"\x08" + shard([(images["png_palette"], 2, 13, 9)], 3, 1, 2))
put("packed_images", "empty", b"\0" + shard([], 1))
