#!/usr/bin/env python3
"""A fake exec2 worker for harness/exec2_test.cpp (standard library only, no numpy).

Flags shape the handshake: --paths absorbed,explicit --stages indexer,... --cp 0|1 --max-tokens N
--dtypes F32,I32 --layouts zigzag --pad-rows attend (sent only when given)
--hello ok|die|garbage|hang|bad_protocol. Each case's behaviour follows its seed:
1 ok (zero `loss` [1] and `kl` [Tp] in --loss-dtype), 2 exit 3 mid-case, 3 a garbage line,
4 cannot_run, 5 error, 6 hang, 7 an answer with the wrong id, 8 ok after 320 KB on stderr.
Every start appends a line to $FAKE_EXEC2_LOG when set.
"""
import json
import os
import struct
import sys
import time

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
log = os.environ.get("FAKE_EXEC2_LOG")
if log:
    with open(log, "a") as f:
        f.write("start %d\n" % os.getpid())

out = sys.stdout


def send(m):
    out.write(json.dumps(m) + "\n")
    out.flush()


def outputs(folder, dtype):
    tp = json.load(open(os.path.join(folder, "layout.json")))["tp"]
    size = {"F32": 4, "F64": 8, "F16": 2}[dtype]
    h = json.dumps({"loss": {"dtype": dtype, "shape": [1], "data_offsets": [0, size]},
                    "kl": {"dtype": dtype, "shape": [tp], "data_offsets": [size, size * (tp + 1)]}}).encode()
    with open(os.path.join(folder, "outputs.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * (size * (tp + 1)))


hello = args.get("--hello", "ok")
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        if hello == "die":
            sys.exit(4)
        if hello == "garbage":
            out.write("this is not json\n")
            out.flush()
            continue
        if hello == "hang":
            time.sleep(60)
        caps = {"type": "capabilities", "protocol": 3 if hello == "bad_protocol" else 2, "name": "fake",
                "stages": args.get("--stages", "indexer,attention,attention_backward,loss,loss_backward").split(","),
                "dtypes": args.get("--dtypes", "F32,F64,I32").split(","),
                "cp": args.get("--cp", "1") == "1",
                "max_tokens": int(args.get("--max-tokens", "100000")),
                "paths": args.get("--paths", "absorbed,explicit").split(",")}
        for flag, key in (("--layouts", "layouts"), ("--pad-rows", "pad_rows")):
            if flag in args:
                caps[key] = [] if args[flag] == "none" else args[flag].split(",")
        send(caps)
    elif m["type"] == "run":
        rid, folder = m["id"], m["folder"]
        seed = json.load(open(os.path.join(folder, "case.json")))["seed"]
        assert os.path.exists(os.path.join(folder, "layout.json"))
        if seed == 2:
            sys.stderr.write("fake: crashing\n")
            sys.exit(3)
        elif seed == 3:
            out.write("garbage {\n")
            out.flush()
        elif seed == 4:
            send({"type": "cannot_run", "id": rid, "reason": "fake declines seed 4"})
        elif seed == 5:
            send({"type": "error", "id": rid, "message": "fake error for seed 5"})
        elif seed == 6:
            time.sleep(60)
        elif seed == 7:
            send({"type": "done", "id": rid + 100})
        else:
            if seed == 8:
                sys.stderr.write("chatter " * 40000 + "\n")  # 320 KB: more than a pipe holds
                sys.stderr.flush()
            outputs(folder, args.get("--loss-dtype", "F32"))
            send({"type": "done", "id": rid})
    elif m["type"] == "bye":
        break
