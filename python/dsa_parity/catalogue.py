"""The tensor catalogue of dsa-parity, read from the C++ side: never listed here by hand.

Sources, first found wins: an explicit path; $DSA_PARITY_CATALOGUE (a JSON file); the
catalogue.json an exec2 session folder holds (the worker passes the path the harness sends);
`dsa-parity catalogue --json` run through $DSA_PARITY_BIN, else `dsa-parity` on $PATH.
"""

import json
import os
import subprocess

FORMAT = "dsa-parity/catalogue/v1"


class Tensor:
    def __init__(self, d):
        self.name = d["name"]
        self.role = d["role"]          # input | injected | output | gradient
        self.stage = d["stage"]        # the stage that produces it (inputs: the first that reads it)
        self.dtype = d["dtype"]        # bf16 | fp32 | i32 (what a device buffer holds)
        self.shape_rule = list(d["shape"])  # extents: Tp, K', H, Dn, R, C, Dv, HI, DI, 1
        self.optional = bool(d.get("optional", False))
        self.alpha = d.get("alpha")
        self.meaning = d.get("meaning", "")

    @property
    def is_result(self):
        return self.role in ("output", "gradient")

    def shape(self, dims, tp, topk):
        """The concrete shape for dims {H, Dn, ...}, a stream of tp rows and top-k topk."""
        out = []
        for e in self.shape_rule:
            if e == "Tp":
                out.append(tp)
            elif e == "K'":
                out.append(min(topk, tp))
            elif e == "1":
                out.append(1)
            else:
                out.append(int(dims[e]))
        return tuple(out)

    def __repr__(self):
        return "Tensor(%s, %s, %s, [%s])" % (self.name, self.role, self.stage, ", ".join(self.shape_rule))


class Catalogue:
    def __init__(self, data):
        if data.get("format") != FORMAT:
            raise ValueError("not a dsa-parity catalogue (format %r, expected %r)" % (data.get("format"), FORMAT))
        self.data = data
        self.stages = list(data["stages"])
        self.tensors = [Tensor(t) for t in data["tensors"]]
        self.by_name = {t.name: t for t in self.tensors}
        self.exec = data.get("exec", {})

    def __getitem__(self, name):
        return self.by_name[name]

    def __contains__(self, name):
        return name in self.by_name

    def inputs(self):
        return [t for t in self.tensors if t.role == "input"]

    def results(self):
        return [t for t in self.tensors if t.is_result]

    def results_of(self, stages):
        return [t for t in self.results() if t.stage in stages]


def _from_binary():
    exe = os.environ.get("DSA_PARITY_BIN", "dsa-parity")
    out = subprocess.run([exe, "catalogue", "--json"], check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def load(path=None):
    """The catalogue (see the module's docstring for where it comes from)."""
    path = path or os.environ.get("DSA_PARITY_CATALOGUE")
    if path:
        with open(path) as f:
            return Catalogue(json.load(f))
    return Catalogue(_from_binary())
