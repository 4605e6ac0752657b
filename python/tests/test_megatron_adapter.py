"""The Megatron-LM adapter (python/dsa_parity/adapters/megatron.py): Megatron's own DSA functions
against the harness. They run where torch imports and a Megatron checkout is found ($MEGATRON_PATH,
else the repository's .megatron/ made by tools/megatron_fetch.sh), and skip saying which is missing."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from tests.helpers import binary, need_binary

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
REPO = os.path.dirname(HERE)

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def megatron_checkout():
    path = os.environ.get("MEGATRON_PATH") or os.path.join(REPO, ".megatron")
    dsa = os.path.join(path, "megatron/core/transformer/experimental_attention_variant/dsa.py")
    return path if os.path.isfile(dsa) else None


MEGATRON = megatron_checkout()
need_torch = unittest.skipUnless(HAVE_TORCH, "torch is not importable (Debian: apt-get install python3-torch)")
need_megatron = unittest.skipUnless(MEGATRON, "no Megatron-LM checkout: set MEGATRON_PATH, or run "
                                    "tools/megatron_fetch.sh MEGATRON_GIT_DIR to make .megatron/")
if MEGATRON:
    os.environ.setdefault("MEGATRON_PATH", MEGATRON)


def harness(args, **env_extra):
    env = dict(os.environ, PYTHONPATH=HERE, MEGATRON_PATH=MEGATRON or "", **env_extra)
    worker = "%s -m dsa_parity.adapters.megatron" % sys.executable
    return subprocess.run([binary()] + args + ["--backend", "exec2:" + worker, "-q"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)


def report_of(args, **env):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "report.json")
        r = harness(args + ["--report", path], **env)
        with open(path) as f:
            return r, json.load(f)


def verdicts(report):
    return [c["verdict"] for c in report["cases"]]


def case_file(name):
    return os.path.join(REPO, "cases", "edge", name)


def small_case(path="absorbed", loss="sparse", seqlens=(5, 0, 11, 1)):
    """A case folder for the worker's run(): case.json, layout.json (cp = 1, zigzag pad 2), inputs."""
    from dsa_parity.worker import Case
    d = tempfile.mkdtemp()
    dims = {"H": 4, "Dn": 8, "R": 4, "C": 16, "Dv": 8, "HI": 8, "DI": 8}
    P = [(L + 1) // 2 * 2 for L in seqlens]
    cu = [int(v) for v in np.concatenate([[0], np.cumsum(P)])]
    real = sum(([1] * L + [0] * (p - L) for L, p in zip(seqlens, P)), [])
    case = {"schema": "dsa-parity/case/v1", "seed": 1, "seqlens": list(seqlens), "dims": dims, "topk": 4,
            "softmax_scale": 0.3, "relu": True, "loss": {"mode": loss, "coeff": 0.7}, "path": path,
            "pad_rows": "attend"}
    layout = {"tp": cu[-1], "cp": 1, "cu_padded": cu, "real": real, "pad_rows": "attend"}
    for name, obj in (("case.json", case), ("layout.json", layout)):
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f)
    tp, H, Dn, R, C, Dv, HI, DI = cu[-1], 4, 8, 4, 16, 8, 8, 8
    shapes = {"q_nope": (tp, H, Dn), "q_pe": (tp, H, R), "c": (tp, C), "k_pe": (tp, R), "W_UK": (H, Dn, C),
              "W_UV": (H, Dv, C), "q_I": (tp, HI, DI), "k_I": (tp, DI), "w": (tp, HI), "dO": (tp, H, Dv)}
    rng = np.random.default_rng(3)
    bf16 = lambda a: torch.tensor(a).to(torch.bfloat16).double().numpy()  # noqa: E731
    return Case(d), {n: bf16(rng.standard_normal(s) * 0.5) for n, s in shapes.items()}


@need_torch
@need_megatron
class AdapterTest(unittest.TestCase):
    def test_loads_megatron_without_the_framework(self):
        from dsa_parity.adapters import megatron_loader
        M = megatron_loader.load()
        self.assertTrue(callable(M.dsa.unfused_dsa_fn))
        self.assertTrue(callable(M.dsa.FusedDSAIndexerLoss.apply))
        self.assertNotIn("transformer_engine", sys.modules)
        self.assertRegex(M.commit, r"^[0-9a-f]{40}$|^unknown$")

    def test_megatron_bounds_are_the_spec_visibility(self):
        # SPEC §1 worked example: L = [5, 11] padded to [8, 12]; query 17 sees keys 8 … 17.
        from dsa_parity.adapters import megatron as A
        from dsa_parity.adapters import megatron_loader
        case = type("C", (), {"tp": 20, "layout": {"cu_padded": [0, 8, 20]}})()
        starts, ends, keys = A.packed_causal_bounds(megatron_loader.load(), case, "cpu")
        self.assertEqual((int(starts[17]), int(ends[17])), (8, 18))
        self.assertEqual((int(starts[7]), int(ends[7])), (0, 8))  # a pad row attends (pad_rows: attend)
        self.assertIsNone(keys)

    def test_megatron_zigzag_cp_rows_are_the_spec_rank_rows(self):
        # SPEC §1 worked example (zigzag, cp = 2, L = [5, 11]): what a CP-driving adapter would rely on.
        from dsa_parity.adapters import megatron_loader
        L = megatron_loader.load().dsa_layout
        cu = torch.tensor([0, 8, 20])
        rows = [L.build_packed_allgather_cp_local_positions(cu, 2, r, "cpu").tolist() for r in range(2)]
        self.assertEqual(rows, [[0, 1, 6, 7, 8, 9, 10, 17, 18, 19], [2, 3, 4, 5, 11, 12, 13, 14, 15, 16]])

    def test_every_output_matches_the_torch_reference_in_fp32(self):
        # Two independent PyTorch implementations of SPEC.md agree on an easy case (no ties, no
        # injected indices): the mapping onto Megatron's arguments is right, stage by stage.
        from dsa_parity.adapters import megatron as A
        from dsa_parity.examples import torch_reference as T
        for path in ("absorbed", "explicit"):
            for loss in ("sparse", "dense"):
                case, x = small_case(path, loss)
                got, want = A.run(case, x), T.run(case, x)
                self.assertEqual(set(got), set(want), (path, loss))
                for n in want:
                    if n == "topk":
                        for a, b in zip(got[n], want[n]):
                            self.assertEqual(set(a[a >= 0]), set(b[b >= 0]))
                        continue
                    fin = np.isfinite(want[n])
                    np.testing.assert_array_equal(np.isfinite(got[n]), fin, err_msg=n)
                    scale = max(1.0, float(np.max(np.abs(want[n][fin]), initial=0)))
                    err = float(np.max(np.abs(got[n][fin] - want[n][fin]), initial=0))
                    self.assertLess(err, 1e-5 * scale, "%s %s %s" % (path, loss, n))

    def test_dsattention_forward_matches_the_torch_reference_in_fp32(self):
        from dsa_parity.adapters import megatron as A
        from dsa_parity.adapters import megatron_module
        from dsa_parity.examples import torch_reference as T
        for path in ("absorbed", "explicit"):
            for loss in ("sparse", "dense", "off"):
                case, x = small_case(path, loss)
                got = A.as_outputs(megatron_module.run(case, x), set(case.stages))
                want = T.run(case, x)
                self.assertEqual(set(want) - set(got), {"scores"})  # optional, not observable there
                for n in set(want) - {"scores", "topk"}:
                    fin = np.isfinite(want[n])
                    scale = max(1.0, float(np.max(np.abs(want[n][fin]), initial=0)))
                    err = float(np.max(np.abs(got[n][fin] - want[n][fin]), initial=0))
                    self.assertLess(err, 1e-5 * scale, "%s %s %s" % (path, loss, n))

    def test_what_megatron_cannot_express_is_cannot_run(self):
        from dsa_parity.adapters import megatron as A
        from dsa_parity.worker import CannotRun
        case, x = small_case()
        case.pad_rows = "masked"
        with self.assertRaisesRegex(CannotRun, "masked"):
            A.run(case, x)
        case.pad_rows, case.cp = "attend", 2
        with self.assertRaisesRegex(CannotRun, "cp = 1"):
            A.run(case, x)
        self.assertFalse(A.CAPABILITIES.cp)


@need_torch
@need_megatron
class StreamingTest(unittest.TestCase):
    def test_streaming_sparse_kl_equals_the_reference_sparse_kl(self):
        # SPEC §7: Megatron's streaming sparse KL (tilelang_dsa's loop, its TileLang indexer kernel
        # replaced by the torch stand-in) and its reference FusedDSAIndexerLoss agree, loss and gradients.
        # Both through the functions and through DSAttention.forward.
        from dsa_parity.adapters import megatron as A
        from dsa_parity.adapters import megatron_module
        entries = {"functions": A.run,
                   "dsattention": lambda c, x: A.as_outputs(megatron_module.run(c, x), set(c.stages))}
        case, x = small_case("absorbed", "sparse")
        for entry, run in entries.items():
            got = {}
            for kernels in ("unfused", "streaming"):
                saved = (A.KERNELS, A.DTYPE)
                A.KERNELS, A.DTYPE = kernels, "bfloat16"
                try:
                    got[kernels] = run(case, x)
                finally:
                    A.KERNELS, A.DTYPE = saved
            for n in ("loss", "kl", "dq_I", "dk_I", "dw"):
                np.testing.assert_allclose(got["streaming"][n], got["unfused"][n], rtol=1e-4, atol=1e-6,
                                           err_msg=entry + " " + n)


@need_torch
@need_megatron
@need_binary
class FuzzTest(unittest.TestCase):
    def test_smoke_fuzz_gives_the_expected_verdicts(self):
        # Every cp = 1 case without injected indices passes; cp > 1 and masked pad rows are
        # cannot-run (never pass or fail).
        r, rep = report_of(["fuzz", "--profile", "smoke", "--cases", "40", "--corpus", "none", "--seed", "7"])
        for c in rep["cases"]:
            cp = c["case"].get("cp", {}).get("size", 1)
            injected = c["case"].get("init", {}).get("inject_indices", False)
            if cp > 1 or c["case"].get("pad_rows") == "masked":
                self.assertEqual(c["verdict"], "cannot-run", c)
            elif not injected:
                self.assertEqual(c["verdict"], "pass", json.dumps(c)[:2000])
        self.assertGreaterEqual(verdicts(rep).count("pass"), 3, r.stdout)

    def test_dsattention_entry_gives_the_expected_verdicts(self):
        # DSAttention.forward itself (DSA_MEGATRON_ENTRY=dsattention) on the same smoke cases.
        r, rep = report_of(["fuzz", "--profile", "smoke", "--cases", "40", "--corpus", "none", "--seed", "7"],
                           DSA_MEGATRON_ENTRY="dsattention")
        for c in rep["cases"]:
            plain = c["case"].get("cp", {}).get("size", 1) == 1 and c["case"].get("pad_rows") != "masked"
            if plain and not c["case"].get("init", {}).get("inject_indices", False):
                self.assertEqual(c["verdict"], "pass", json.dumps(c)[:2000])
        self.assertGreaterEqual(verdicts(rep).count("pass"), 3, r.stdout)

    def test_dsattention_takes_one_head_explicit_for_absorbed(self):
        # docs/megatron-parity.md D4: a crash in DSAttention, a pass through unfused_dsa_fn.
        f = os.path.join(REPO, "docs", "megatron-cases", "dsattention_explicit_taken_for_absorbed.json")
        r, rep = report_of(["repro", f], DSA_MEGATRON_ENTRY="dsattention")
        self.assertEqual(verdicts(rep), ["fail"], r.stdout)
        self.assertIn("/crash", rep["cases"][0]["bucket"])
        self.assertIn("requires up_v_weight", rep["cases"][0]["message"])
        r, rep = report_of(["repro", f])
        self.assertEqual(verdicts(rep), ["pass"], r.stdout)

    def test_capability_refused_cases_are_cannot_run(self):
        for name in ("zigzag_worked_example_cp2.json", "pad_rows_masked_loss.json"):
            r, rep = report_of(["repro", case_file(name)])
            self.assertEqual(verdicts(rep), ["cannot-run"], name + "\n" + r.stdout)

    def test_streaming_is_declined_in_fp32(self):
        # Megatron's streaming path takes bf16 indexer tensors only: fp32 is cannot-run, not a pass.
        r, rep = report_of(["repro", case_file("streaming_kl_last_chunk.json")], DSA_MEGATRON_KERNELS="streaming")
        self.assertEqual(verdicts(rep), ["cannot-run"], r.stdout)

    def test_documented_differences_are_reported(self):
        # docs/megatron-parity.md D1-D3: each shrunk case fails on Megatron as written there; the
        # duplicate-key case passes on the absorbed path (a set there).
        cases = os.path.join(REPO, "docs", "megatron-cases")
        expect = {"absorbed_index_out_of_range_crash.json": ("fail", "crash"),
                  "explicit_index_out_of_range_aliased.json": ("fail", "mismatch"),
                  "explicit_duplicate_keys_counted_twice.json": ("fail", "mismatch")}
        for name, (verdict, failure) in expect.items():
            r, rep = report_of(["repro", os.path.join(cases, name)])
            self.assertEqual(verdicts(rep), [verdict], name + "\n" + r.stdout)
            self.assertIn("/" + failure, rep["cases"][0]["bucket"], name)
        with open(os.path.join(cases, "explicit_duplicate_keys_counted_twice.json")) as f:
            case = json.load(f)
        case["path"] = "absorbed"
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(case, f)
        try:
            r, rep = report_of(["repro", f.name])
            self.assertEqual(verdicts(rep), ["pass"], r.stdout)
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
