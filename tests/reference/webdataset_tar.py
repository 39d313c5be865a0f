"""Python's side of the shard format checks, done the way webdataset does it with tarfile.

  read DIR              print {"samples": [{"key", "fields": {ext: {"size", "sha256", "text"?}}}]}
                        grouping members by webdataset's rule (key = path up to the first '.'
                        of the last component); .npy fields are also loaded with numpy
  write DIR             write two webdataset-style shards with tarfile (GNU and pax formats,
                        a long member name, .npy from numpy, .cls, .json, .txt) and print
                        what was written in the same form as read
  malicious DIR         write shards Frugal must refuse: '..' in a name, an absolute name, a
                        symlink member
  jpeg FILE OUT.npy     decode a JPEG with Pillow into an RGB uint8 .npy
"""
import hashlib
import io
import json
import os
import sys
import tarfile

import numpy as np


def describe(fields):
    out = {}
    for ext, data in sorted(fields.items()):
        entry = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if ext.endswith(("cls", "txt", "json")):
            entry["text"] = data.decode("utf-8")
        if ext.endswith("npy"):
            array = np.load(io.BytesIO(data))
            entry["npy"] = {"dtype": str(array.dtype), "shape": list(array.shape), "sum": float(array.astype(np.float64).sum())}
        out[ext] = entry
    return out


def base_plus_ext(path):
    # webdataset.tariterators.base_plus_ext: key up to the first '.' of the last component
    directory, _, name = path.rpartition("/")
    if "." not in name:
        return path, ""
    stem, _, ext = name.partition(".")
    return (directory + "/" if directory else "") + stem, ext


def read(directory):
    samples = []
    for shard in sorted(f for f in os.listdir(directory) if f.endswith(".tar")):
        with tarfile.open(os.path.join(directory, shard)) as tar:
            current = None
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = base_plus_ext(member.name)
                if current is None or current["key"] != key:
                    current = {"key": key, "fields": {}}
                    samples.append(current)
                current["fields"][ext] = tar.extractfile(member).read()
    return [{"key": s["key"], "fields": describe(s["fields"])} for s in samples]


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o444
    tar.addfile(info, io.BytesIO(data))


def npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def write(directory):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(3)
    written = []
    n = 0
    for shard, fmt in enumerate([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]):
        with tarfile.open(os.path.join(directory, f"py-{shard:06d}.tar"), "w", format=fmt) as tar:
            for _ in range(7):
                key = f"sample{n:04d}"
                if n == 5:  # longer than ustar's 100-byte name field
                    key = "deep/" + "x" * 120 + f"/sample{n:04d}"
                fields = {
                    "npy": npy_bytes(rng.standard_normal((3, 2)).astype(np.float32)),
                    "cls": str(n % 3).encode(),
                    "json": json.dumps({"n": n, "text": "héllo"}, ensure_ascii=False).encode(),
                    "seg.txt": f"second extension {n}".encode(),
                }
                for ext, data in fields.items():
                    add(tar, f"{key}.{ext}", data)
                written.append({"key": key, "fields": describe(fields)})
                n += 1
    return written


def malicious(directory):
    os.makedirs(directory, exist_ok=True)
    with tarfile.open(os.path.join(directory, "dotdot.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "ok0.txt", b"fine")
        add(tar, "../escape.txt", b"evil")
    with tarfile.open(os.path.join(directory, "absolute.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "ok0.txt", b"fine")
        add(tar, "/etc/evil.txt", b"evil")  # addfile keeps the leading '/' (only add() strips it)
    with tarfile.open(os.path.join(directory, "symlink.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "ok0.txt", b"fine")
        link = tarfile.TarInfo("ok1.txt")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    return {"written": ["dotdot.tar", "absolute.tar", "symlink.tar"]}


def jpeg(path, out):
    from PIL import Image

    with Image.open(path) as image:
        np.save(out, np.asarray(image.convert("RGB")))
    return {"decoded": out}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "read":
        print(json.dumps({"samples": read(sys.argv[2])}))
    elif mode == "write":
        print(json.dumps({"samples": write(sys.argv[2])}))
    elif mode == "malicious":
        print(json.dumps(malicious(sys.argv[2])))
    elif mode == "jpeg":
        print(json.dumps(jpeg(sys.argv[2], sys.argv[3])))
    else:
        raise SystemExit(f"unknown mode {mode}")
