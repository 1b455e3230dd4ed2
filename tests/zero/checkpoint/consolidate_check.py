#!/usr/bin/env python3
"""End-to-end check of tools/zw_consolidate, independent of the C++ reader.

Writes a sharded checkpoint of the test model with zw_ckpt_fixture (which also dumps the full master tensors as
raw f32), consolidates it with zw_consolidate in f32, bf16 and f16, and reads each output with Python's
`safetensors` package when it (and numpy) are installed, else with a plain struct/json parser that applies the
format's rules (8-byte little-endian header length, JSON header, data_offsets covering the data without holes).
Expected bf16/f16 values are rounded to nearest-even here in Python. Also checks that the tool refuses a
checkpoint without DONE and one with a corrupted shard. Exit code 0 when every check passes.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def parse_safetensors(path):
    """Returns (metadata, {name: (dtype, shape, raw bytes)}) with the format's checks."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), "header length beyond the file"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for begin, end, name in spans:
        assert begin == pos, f"hole or overlap before {name}"
        pos = end
    assert pos == len(data), "tensors do not cover the data section exactly"
    out = {}
    for name, v in header.items():
        count = 1
        for e in v["shape"]:
            count *= e
        begin, end = v["data_offsets"]
        assert end - begin == count * DTYPE_BYTES[v["dtype"]], f"{name}: size does not match dtype and shape"
        out[name] = (v["dtype"], v["shape"], data[begin:end])
    return meta, out


def read_with_package(path):
    """The same triple through the safetensors package, or None when it is not installed."""
    try:
        import numpy  # noqa: F401
        from safetensors import safe_open
    except ImportError:
        return None
    names = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
    out = {}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        for name in f.keys():
            sl = f.get_slice(name)
            dtype = sl.get_dtype()
            dtype = {"F32": "F32", "F16": "F16", "BF16": "BF16"}.get(dtype, names.get(dtype, dtype))
            if dtype == "BF16":  # numpy has no bfloat16: fall back to the bytes for this tensor
                out[name] = (dtype, list(sl.get_shape()), None)
            else:
                out[name] = (dtype, list(sl.get_shape()), f.get_tensor(name).tobytes())
    return meta, out


def bf16_bits(x):
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def expected_bytes(raw, dtype):
    if dtype == "F32":
        return raw
    values = struct.unpack(f"<{len(raw) // 4}f", raw)
    if dtype == "BF16":
        return struct.pack(f"<{len(values)}H", *[bf16_bits(v) for v in values])
    return struct.pack(f"<{len(values)}e", *values)


def check_output(path, expected_dir, dtype):
    manifest = json.load(open(os.path.join(expected_dir, "manifest.json")))["params"]
    meta, tensors = parse_safetensors(path)
    assert meta.get("format") == "pt", meta
    assert sorted(tensors) == sorted(p["name"] for p in manifest), (sorted(tensors), manifest)
    package = read_with_package(path)
    for p in manifest:
        got_dtype, shape, data = tensors[p["name"]]
        assert got_dtype == dtype, (p["name"], got_dtype, dtype)
        assert shape == p["shape"], (p["name"], shape, p["shape"])
        raw = open(os.path.join(expected_dir, p["file"]), "rb").read()
        assert data == expected_bytes(raw, dtype), f"{p['name']}: values differ ({dtype})"
        if package is not None:
            pdtype, pshape, pdata = package[1][p["name"]]
            assert pdtype == dtype and pshape == p["shape"], (p["name"], pdtype, pshape)
            assert pdata is None or pdata == data, f"{p['name']}: safetensors package read other bytes"
    return "safetensors package + struct parser" if package is not None else "struct parser"


def run(cmd, expect_rc=0, needle=None):
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == expect_rc, f"{cmd}: exit {r.returncode}, wanted {expect_rc}\n{r.stdout}\n{r.stderr}"
    if needle is not None:
        assert needle in r.stderr, f"{cmd}: stderr lacks {needle!r}:\n{r.stderr}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="zw_consolidate_")
    passed = 0
    try:
        for world, alignment in ((3, 4), (4, 1)):
            ckpt = os.path.join(work, f"ckpt_w{world}")
            expected = os.path.join(work, f"expected_w{world}")
            run([args.fixture, ckpt, expected, str(world), str(alignment)])
            for flag, dtype in (("f32", "F32"), ("bf16", "BF16"), ("f16", "F16")):
                out = os.path.join(work, f"w{world}_{flag}.safetensors")
                run([args.tool, ckpt, out, "--dtype", flag])
                how = check_output(out, expected, dtype)
                print(f"ok: world {world}, {flag}: full tensors equal ({how})")
                passed += 1
        ckpt = os.path.join(work, "ckpt_w3")
        shard = os.path.join(ckpt, "rank00001.safetensors")
        with open(shard, "r+b") as f:
            f.seek(-5, os.SEEK_END)
            b = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x10]))
        run([args.tool, ckpt, os.path.join(work, "bad.safetensors")], 1, "corrupt")
        print("ok: corrupted shard refused")
        passed += 1
        os.remove(os.path.join(ckpt, "DONE"))
        run([args.tool, ckpt, os.path.join(work, "bad.safetensors")], 1, "DONE")
        print("ok: checkpoint without DONE refused")
        passed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
