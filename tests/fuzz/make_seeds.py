#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
small valid inputs of each format, so the fuzzers start from the parsers'
good paths. Run from anywhere; rewrites the files it owns. Files named
regression_* are inputs that once crashed a target, committed by hand with
the fix so that every run replays them."""
import gzip
import json
import os
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
