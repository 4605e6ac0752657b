import io
import json
import os
import tempfile
import unittest

import numpy as np

from dsa_parity import safetensors as st
from dsa_parity.worker import Capabilities, CannotRun, serve

CASE = {"schema": "dsa-parity/case/v1", "seed": 1, "seqlens": [2], "cp": {"size": 1, "layout": "zigzag",
        "pad_multiple": 0}, "dims": {"H": 1, "Dn": 2, "R": 2, "C": 2, "Dv": 2, "HI": 1, "DI": 2}, "topk": 4,
        "softmax_scale": 0.5, "relu": True, "loss": {"mode": "off", "coeff": 1.0}, "path": "absorbed",
        "pad_rows": "attend", "stages": ["indexer"]}
LAYOUT = {"format": "dsa-parity/exec-layout/v1", "tp": 2, "cp": 1, "layout": "zigzag", "pad_multiple": 2,
          "pad_rows": "attend", "rows_per_rank": 2, "cu_padded": [0, 2], "lengths": [2], "real": [1, 1],
          "rank_rows": [[0, 1]]}


def folder(d, name):
    f = os.path.join(d, name)
    os.makedirs(f)
    json.dump(CASE, open(os.path.join(f, "case.json"), "w"))
    json.dump(LAYOUT, open(os.path.join(f, "layout.json"), "w"))
    st.write(os.path.join(f, "inputs.safetensors"), {"k_I": st.f32_to_bf16(np.ones((2, 2), np.float32))})
    return f


class WorkerTest(unittest.TestCase):
    def test_the_loop(self):
        seen = []

        def run(case, inputs):
            seen.append((case.tp, case.width, inputs["k_I"].dtype))
            print("stray output goes to stderr")
            if case.folder.endswith("b"):
                raise CannotRun("not b")
            if case.folder.endswith("c"):
                raise RuntimeError("boom")
            return {"topk": np.array([[0, -1], [0, 1]])}

        with tempfile.TemporaryDirectory() as d:
            a, b, c = folder(d, "a"), folder(d, "b"), folder(d, "c")
            msgs = [{"type": "hello", "protocol": 2}] + [{"type": "run", "id": i, "folder": f}
                                                         for i, f in enumerate([a, b, c], 1)] + [{"type": "bye"}]
            out = io.StringIO()
            serve(run, Capabilities(name="t", stages=["indexer"], dtypes=["I32"]),
                  stdin=io.StringIO("".join(json.dumps(m) + "\n" for m in msgs)), stdout=out)
            lines = [json.loads(l) for l in out.getvalue().splitlines()]
            self.assertEqual(lines[0]["type"], "capabilities")
            self.assertEqual(lines[0]["stages"], ["indexer"])
            self.assertEqual(lines[0]["protocol"], 2)
            self.assertEqual(lines[1], {"type": "done", "id": 1})
            self.assertEqual(lines[2], {"type": "cannot_run", "id": 2, "reason": "not b"})
            self.assertEqual(lines[3]["type"], "error")
            self.assertIn("boom", lines[3]["message"])
            t, dtypes, _ = st.read(os.path.join(a, "outputs.safetensors"))
            self.assertEqual(dtypes["topk"], "I32")
            np.testing.assert_array_equal(t["topk"], [[0, -1], [0, 1]])
        self.assertEqual(seen[0], (2, 2, np.float64))

    def test_layouts_and_pad_rows_are_declared_only_when_given(self):
        self.assertNotIn("layouts", Capabilities().message())
        self.assertNotIn("pad_rows", Capabilities().message())
        m = Capabilities(layouts=["zigzag"], pad_rows=("attend",)).message()
        self.assertEqual(m["layouts"], ["zigzag"])
        self.assertEqual(m["pad_rows"], ["attend"])


if __name__ == "__main__":
    unittest.main()
