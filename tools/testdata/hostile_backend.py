#!/usr/bin/env python3
"""A hostile exec backend for tools/hostile_exec_test.cpp: `hostile_backend.py MODE FOLDER`.

Each MODE is one way an external implementation can misbehave (crash, hang, leave children
behind, write something that is not a regular file, a malformed or lying safetensors file, bad
values, floods of output). Modes that need real outputs first run the lowp worker
($DSA_PARITY_BIN exec-worker --backend lowp FOLDER) and then damage what it wrote. Every process
a mode starts appends its pid to $HOSTILE_PIDS, so the test can check that none survives.
"""
import json, os, signal, struct, subprocess, sys, time

MODE, FOLDER = sys.argv[1], sys.argv[2]
OUT = os.path.join(FOLDER, "outputs.safetensors")
BIN = os.environ.get("DSA_PARITY_BIN", "dsa-parity")
OUTSIDE = os.path.join(os.environ.get("HOSTILE_SCRATCH", os.path.dirname(FOLDER)), os.path.basename(FOLDER) + ".outside")


def note_pid(pid):
    path = os.environ.get("HOSTILE_PIDS")
    if path:
        with open(path, "a") as f:
            f.write("%d\n" % pid)


note_pid(os.getpid())


def legit():
    subprocess.run([BIN, "exec-worker", "--backend", "lowp", FOLDER], check=True)


def read(path=OUT):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    meta = h.pop("__metadata__", None)
    t = {k: [v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]] for k, v in h.items()}
    return t, meta


def header_bytes(header):
    hs = header if isinstance(header, (bytes, bytearray)) else json.dumps(header).encode()
    return struct.pack("<Q", len(hs)) + hs


def write(tensors, path=OUT, extra=b""):
    header, data, off = {}, b"", 0
    for k, (dt, shape, raw) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    open(path, "wb").write(header_bytes(header) + data + extra)


def floats(t):  # names of float tensors
    return [k for k, v in t.items() if v[0] in ("F32", "F64", "BF16")]


def fill(t, value):
    for k in floats(t):
        dt, shape, raw = t[k]
        size = {"F32": 4, "F64": 8, "BF16": 2}[dt]
        n = len(raw) // size
        if dt == "F32":
            t[k][2] = struct.pack("<%df" % n, *([value] * n))
        elif dt == "F64":
            t[k][2] = struct.pack("<%dd" % n, *([value] * n))
        else:
            t[k][2] = struct.pack("<%df" % n, *([value] * n))[2::4] + b""  # not used: worker writes F32/F64


def damaged(fn):
    legit()
    t, _ = read()
    fn(t)
    write(t)


def stray(hold_output):
    legit()
    kw = {} if hold_output else {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    p = subprocess.Popen(["sleep", "300"], **kw)  # same process group, outlives this script
    note_pid(p.pid)


def scale_O(t):
    dt, shape, raw = t["O"]
    n = len(raw) // 4
    v = struct.unpack("<%df" % n, raw) if dt == "F32" else None
    if v is None:
        n = len(raw) // 8
        t["O"][2] = struct.pack("<%dd" % n, *[x * 1.5 + 0.25 for x in struct.unpack("<%dd" % n, raw)])
    else:
        t["O"][2] = struct.pack("<%df" % n, *[x * 1.5 + 0.25 for x in v])


def topk_values(value):
    def f(t):
        dt, shape, raw = t["topk"]
        n = len(raw) // 4
        t["topk"][2] = struct.pack("<%di" % n, *([value] * n))
    return f


def topk_i64(t):
    dt, shape, raw = t["topk"]
    n = len(raw) // 4
    t["topk"] = ["I64", shape, struct.pack("<%dq" % n, *struct.unpack("<%di" % n, raw))]


def to_f16(t):
    for k in floats(t):
        dt, shape, raw = t[k]
        n = len(raw) // (4 if dt == "F32" else 8)
        t[k] = ["F16", shape, b"\0\0" * n]


def raw_header(h, data=b""):
    open(OUT, "wb").write(header_bytes(h) + data)


MODES = {
    "legit": legit,
    "exit1": lambda: sys.exit(1),
    "exit3_after_write": lambda: (legit(), sys.exit(3)),
    "segv": lambda: os.kill(os.getpid(), signal.SIGSEGV),
    "sigkill": lambda: os.kill(os.getpid(), signal.SIGKILL),
    "abort": lambda: os.abort(),
    "hang": lambda: time.sleep(300),
    "hang_ignoring_term": lambda: (signal.signal(signal.SIGTERM, signal.SIG_IGN), time.sleep(300)),
    "hang_after_write": lambda: (legit(), time.sleep(300)),
    "hang_closed_fds": lambda: (os.close(1), os.close(2), time.sleep(300)),
    "stray_child": lambda: stray(False),
    "stray_child_holding_stderr": lambda: stray(True),
    "fifo_outputs": lambda: os.mkfifo(OUT),
    "symlink_dev_zero": lambda: os.symlink("/dev/zero", OUT),
    "symlink_dev_urandom": lambda: os.symlink("/dev/urandom", OUT),
    "symlink_outside": lambda: (legit(), os.rename(OUT, OUTSIDE), os.symlink(OUTSIDE, OUT)),
    "symlink_inside": lambda: (legit(), os.rename(OUT, os.path.join(FOLDER, "real.safetensors")),
                               os.symlink("real.safetensors", OUT)),
    "symlink_dangling": lambda: os.symlink(os.path.join(FOLDER, "nowhere"), OUT),
    "directory": lambda: os.mkdir(OUT),
    "empty_file": lambda: open(OUT, "wb").close(),
    "seven_bytes": lambda: open(OUT, "wb").write(b"\x01" * 7),
    "truncated_header": lambda: open(OUT, "wb").write(struct.pack("<Q", 200) + b'{"O": {"dtype"'),
    "header_length_huge": lambda: open(OUT, "wb").write(struct.pack("<Q", 2 ** 63) + b"{}"),
    "header_not_json": lambda: raw_header(b"this is not json at all"),
    "header_json_array": lambda: raw_header(b"[1, 2, 3]"),
    "header_deep_nesting": lambda: raw_header(b"[" * 5000 + b"]" * 5000),
    "header_invalid_utf8": lambda: raw_header(b'{"\xff\xfe": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4),
    "duplicate_names": lambda: raw_header(b'{"loss": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
                                          b' "loss": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', b"\0" * 8),
    "unknown_name": lambda: damaged(lambda t: t.__setitem__("bogus", ["F32", [1], b"\0" * 4])),
    "wrong_dtype_topk_f32": lambda: damaged(lambda t: t["topk"].__setitem__(0, "F32")),
    "wrong_shape": lambda: damaged(lambda t: t["O"].__setitem__(1, list(reversed(t["O"][1])))),
    "wrong_rank": lambda: damaged(lambda t: t["lse"].__setitem__(1, [t["lse"][1][0] * t["lse"][1][1]])),
    "negative_shape": lambda: raw_header({"loss": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
    "offsets_overlapping": lambda: raw_header({"loss": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                               "kl": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 8),
    "offsets_out_of_range": lambda: raw_header({"loss": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4000]}}, b"\0" * 4),
    "offsets_float": lambda: raw_header({"loss": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}}, b"\0" * 4),
    "metadata_not_string": lambda: raw_header({"__metadata__": {"format": 1}}),
    "trailing_bytes": lambda: (legit(), write(read()[0], extra=b"garbage after the last tensor")),
    "nan_everywhere": lambda: damaged(lambda t: fill(t, float("nan"))),
    "inf_everywhere": lambda: damaged(lambda t: fill(t, float("inf"))),
    "poison_bytes": lambda: damaged(lambda t: t["O"].__setitem__(2, b"\xff" * len(t["O"][2]))),
    "wrong_values": lambda: damaged(scale_O),
    "only_topk": lambda: damaged(lambda t: [t.pop(k) for k in list(t) if k != "topk"]),
    "writes_nothing": lambda: None,
    "oversized_file": lambda: (legit(), write(read()[0], extra=b"\0" * (8 << 20))),
    "topk_out_of_range": lambda: damaged(topk_values(2 ** 31 - 1)),
    "topk_negative": lambda: damaged(topk_values(-5)),
    "topk_i64": lambda: damaged(topk_i64),
    "f16_outputs": lambda: damaged(to_f16),
    "invalid_utf8_stderr": lambda: (os.write(2, b"bad \xff\xfe\xc0\xaf bytes \xed\xa0\x80\n" * 100), sys.exit(1)),
    "huge_stderr": lambda: (os.write(2, (b"x" * 1023 + b"\n") * (10 << 10)), sys.exit(1)),
    "stdout_spam": lambda: (legit(), os.write(1, (b"y" * 1023 + b"\n") * (10 << 10))),
    "control_chars_stderr": lambda: (os.write(2, b"\x1b[31mred\x00\x07\x08</failure>]]>&\n"), sys.exit(2)),
    "deletes_its_folder": lambda: subprocess.run(["rm", "-rf", FOLDER], check=True),
    "chmod_000_outputs": lambda: (legit(), os.chmod(OUT, 0)),
    "chmod_000_folder": lambda: (legit(), os.chmod(FOLDER, 0)),
}

if __name__ == "__main__":
    if MODE == "--list":
        print("\n".join(MODES))
        sys.exit(0)
    MODES[MODE]()
