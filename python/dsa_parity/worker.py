"""The exec2 worker loop (protocol v2, README "External backends").

One JSON object per line. The harness writes to the worker's stdin, the worker answers on stdout;
anything else the worker prints must go to stderr (serve() points sys.stdout at stderr while the
user's code runs, so a stray print cannot corrupt the protocol).

    harness -> {"type": "hello", "protocol": 2, "session": DIR, "catalogue": DIR/catalogue.json}
    worker  -> {"type": "capabilities", "protocol": 2, "name": .., "stages": [..], "dtypes": [..],
                "cp": bool, "max_tokens": N, "paths": ["absorbed", "explicit"],
                "deterministic": [result tensor names]}   (optional: what --repeat holds to its bits)
    harness -> {"type": "run", "id": N, "folder": FOLDER}   (case.json, layout.json, inputs.safetensors)
    worker  -> {"type": "done", "id": N}                     (FOLDER/outputs.safetensors written)
             | {"type": "cannot_run", "id": N, "reason": ..}
             | {"type": "error", "id": N, "message": ..}
    harness -> {"type": "bye"}                                (then stdin closes)

Usage:

    from dsa_parity.worker import Capabilities, CannotRun, serve
    def run(case, inputs):            # case: Case, inputs: {name: float64 ndarray}
        ...
        return {"topk": ..., "O": ...}  # any outputs of the catalogue, rows in global stream order
    serve(run, Capabilities(name="mine", stages=["indexer", "attention"]))
"""

import json
import os
import sys
import traceback

import numpy as np

from . import PROTOCOL
from . import catalogue as catalogue_mod
from . import safetensors as st

ALL_STAGES = ["indexer", "attention", "attention_backward", "loss", "loss_backward"]


class CannotRun(Exception):
    """Raised by run(case, inputs): this worker cannot run this case (a cannot-run verdict)."""


class Capabilities:
    def __init__(self, name="python", stages=None, dtypes=("F32", "F64", "I32", "I64"), cp=True,
                 max_tokens=1 << 20, paths=("absorbed", "explicit"), deterministic=(), layouts=None, pad_rows=None):
        self.name = name
        self.stages = list(stages or ALL_STAGES)
        self.dtypes = list(dtypes)
        self.cp = bool(cp)
        self.max_tokens = int(max_tokens)
        self.paths = list(paths)
        # Result tensors promised bitwise reproducible run to run (dsa-parity --repeat checks them).
        self.deterministic = list(deterministic)
        # The CP layouts (zigzag, contiguous) and pad-row modes (attend, masked) it takes; None: all.
        # fuzz draws random cases only within them, and sends no case outside them.
        self.layouts = None if layouts is None else list(layouts)
        self.pad_rows = None if pad_rows is None else list(pad_rows)

    def message(self):
        m = {"type": "capabilities", "protocol": PROTOCOL, "name": self.name, "stages": self.stages,
             "dtypes": self.dtypes, "cp": self.cp, "max_tokens": self.max_tokens, "paths": self.paths,
             "deterministic": self.deterministic}
        if self.layouts is not None:
            m["layouts"] = self.layouts
        if self.pad_rows is not None:
            m["pad_rows"] = self.pad_rows
        return m


class Case:
    """case.json and layout.json of one request, with attribute access to the common fields."""

    def __init__(self, folder, catalogue=None):
        self.folder = folder
        with open(os.path.join(folder, "case.json")) as f:
            self.json = json.load(f)
        with open(os.path.join(folder, "layout.json")) as f:
            self.layout = json.load(f)
        j = self.json
        self.seed = j["seed"]
        self.seqlens = list(j["seqlens"])
        self.dims = dict(j["dims"])
        self.topk = int(j["topk"])
        self.softmax_scale = float(j["softmax_scale"])
        self.relu = bool(j["relu"])
        self.loss_mode = j["loss"]["mode"]
        self.coeff = float(j["loss"]["coeff"])
        self.path = j["path"]
        self.pad_rows = j["pad_rows"]
        self.stages = list(j.get("stages", ALL_STAGES))
        self.tp = int(self.layout["tp"])
        self.cp = int(self.layout["cp"])
        self.width = min(self.topk, self.tp)  # K'
        self.catalogue = catalogue

    def shape(self, name):
        return self.catalogue[name].shape(self.dims, self.tp, self.topk)


def read_inputs(folder):
    """inputs.safetensors as {name: ndarray}: floats as float64, integer tensors as int64."""
    tensors, dtypes, _ = st.read(os.path.join(folder, "inputs.safetensors"))
    out = {}
    for n, a in tensors.items():
        out[n] = a.astype(np.int64) if dtypes[n] in ("I32", "I64") else st.to_float(a, dtypes[n])
    return out


def write_outputs(folder, outputs, case, caps):
    """outputs -> FOLDER/outputs.safetensors, checked against the catalogue; floats as F64 when the
    capabilities list F64, else F32; integers as I32 (I64 when I32 is not listed)."""
    tensors = {}
    for n, a in outputs.items():
        if case.catalogue is not None:
            if n not in case.catalogue or not case.catalogue[n].is_result:
                raise ValueError("run() returned %r, which is not an output of the catalogue" % n)
            want = case.shape(n)
            if tuple(np.shape(a)) != want:
                raise ValueError("run() returned %r of shape %s, the catalogue says %s" % (n, np.shape(a), want))
        a = np.asarray(a)
        if np.issubdtype(a.dtype, np.integer):
            tensors[n] = a.astype(np.int32 if "I32" in caps.dtypes else np.int64)
        elif a.dtype == np.uint16 and "BF16" in caps.dtypes:
            tensors[n] = a
        else:
            tensors[n] = a.astype(np.float64 if "F64" in caps.dtypes else np.float32)
    st.write(os.path.join(folder, "outputs.safetensors"), tensors,
             metadata={"format": "dsa-parity/exec-outputs/v1", "worker": caps.name})


def serve(run, caps, stdin=None, stdout=None):
    """Runs the worker loop until bye or end of input. Returns 0."""
    stdin = stdin or sys.stdin
    proto = stdout or sys.stdout
    user_stdout = sys.stdout
    catalogue = None

    def send(msg):
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    for line in stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        kind = msg.get("type")
        if kind == "hello":
            if msg.get("catalogue"):
                try:
                    catalogue = catalogue_mod.load(msg["catalogue"])
                except (OSError, ValueError) as e:
                    print("dsa_parity.worker: cannot read the catalogue: %s" % e, file=sys.stderr)
            send(caps.message())
        elif kind == "run":
            rid = msg["id"]
            if stdout is None:
                sys.stdout = sys.stderr  # stray prints of the user's code go to stderr
            try:
                case = Case(msg["folder"], catalogue)
                outputs = run(case, read_inputs(msg["folder"]))
                write_outputs(msg["folder"], outputs, case, caps)
                answer = {"type": "done", "id": rid}
            except CannotRun as e:
                answer = {"type": "cannot_run", "id": rid, "reason": str(e) or "cannot run"}
            except Exception as e:  # the user's bug: an error answer, the worker lives on
                traceback.print_exc(file=sys.stderr)
                answer = {"type": "error", "id": rid, "message": "%s: %s" % (type(e).__name__, e)}
            finally:
                sys.stdout = user_stdout
            send(answer)
        elif kind == "bye":
            break
        else:
            print("dsa_parity.worker: ignoring a message of type %r" % kind, file=sys.stderr)
    return 0
