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


def random_inputs(tp, seed):
    """The inputs of small_case's dims (H 4, Dn 8, R 4, C 16, Dv 8, HI 8, DI 8) over tp rows: N(0, 0.5)
    rounded to bf16."""
    H, Dn, R, C, Dv, HI, DI = 4, 8, 4, 16, 8, 8, 8
    shapes = {"q_nope": (tp, H, Dn), "q_pe": (tp, H, R), "c": (tp, C), "k_pe": (tp, R), "W_UK": (H, Dn, C),
              "W_UV": (H, Dv, C), "q_I": (tp, HI, DI), "k_I": (tp, DI), "w": (tp, HI), "dO": (tp, H, Dv)}
    rng = np.random.default_rng(seed)
    return {n: torch.tensor(rng.standard_normal(sh) * 0.5).to(torch.bfloat16).double().numpy()
            for n, sh in shapes.items()}


def small_case(path="absorbed", loss="sparse", seqlens=(5, 0, 11, 1), relu=True):
    """A case folder for the worker's run(): case.json, layout.json (cp = 1, zigzag pad 2), inputs."""
    from dsa_parity.worker import Case
    d = tempfile.mkdtemp()
    dims = {"H": 4, "Dn": 8, "R": 4, "C": 16, "Dv": 8, "HI": 8, "DI": 8}
    P = [(L + 1) // 2 * 2 for L in seqlens]
    cu = [int(v) for v in np.concatenate([[0], np.cumsum(P)])]
    real = sum(([1] * L + [0] * (p - L) for L, p in zip(seqlens, P)), [])
    case = {"schema": "dsa-parity/case/v1", "seed": 1, "seqlens": list(seqlens), "dims": dims, "topk": 4,
            "softmax_scale": 0.3, "relu": relu, "loss": {"mode": loss, "coeff": 0.7}, "path": path,
            "pad_rows": "attend"}
    layout = {"tp": cu[-1], "cp": 1, "cu_padded": cu, "real": real, "pad_rows": "attend"}
    for name, obj in (("case.json", case), ("layout.json", layout)):
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f)
    return Case(d), random_inputs(cu[-1], 3)


def cp_case(cp, path="absorbed", loss="sparse", seqlens=(5, 0, 11, 1), relu=True):
    """small_case's tensors on a zigzag CP layout (SPEC §1: each segment padded to 2·cp, rank r
    holding chunk r then chunk 2cp−1−r of every segment); the same stream as a cp = 1 case."""
    from dsa_parity.worker import Case
    case1, _ = small_case(path, loss, seqlens, relu)
    P = [(L + 2 * cp - 1) // (2 * cp) * 2 * cp for L in seqlens]
    cu = [int(v) for v in np.concatenate([[0], np.cumsum(P)])]
    rank_rows = [sum((list(range(c + r * p // (2 * cp), c + (r + 1) * p // (2 * cp))) +
                      list(range(c + (2 * cp - 1 - r) * p // (2 * cp), c + (2 * cp - r) * p // (2 * cp)))
                      for c, p in zip(cu, P)), []) for r in range(cp)]
    real = sum(([1] * L + [0] * (p - L) for L, p in zip(seqlens, P)), [])
    layout = {"tp": cu[-1], "cp": cp, "layout": "zigzag", "cu_padded": cu, "real": real, "pad_rows": "attend",
              "rows_per_rank": cu[-1] // cp, "rank_rows": rank_rows}
    with open(os.path.join(case1.folder, "layout.json"), "w") as f:
        json.dump(layout, f)
    return Case(case1.folder), random_inputs(cu[-1], 5)


def processes_with(marker):
    """Live processes whose environment holds marker (the test's own rank processes, if any survive)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


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
        from dsa_parity.adapters import megatron_cp
        case, x = cp_case(2)
        case.layout["layout"] = "contiguous"
        with self.assertRaisesRegex(CannotRun, "zigzag only"):
            megatron_cp.run(case, x)
        self.assertTrue(A.CAPABILITIES.cp)


@need_torch
@need_megatron
class ContextParallelTest(unittest.TestCase):
    def test_cp_ranks_give_megatron_cp1_answers_but_indexer_grads_times_cp(self):
        # Megatron's CP (cp rank processes over gloo, DSAttention.forward each, its gathers, reorder,
        # rank-local bounds and loss reduction) against Megatron at cp = 1 on the same padded
        # stream: every output agrees except the indexer gradients, cp times larger
        # (docs/megatron-parity.md D5: each rank backpropagates its own rows' mean).
        from dsa_parity.adapters import megatron as A
        from dsa_parity.adapters import megatron_cp
        # No ReLU: its zeros tie index scores, and where the ranks run on the CPU and cp = 1 on a GPU
        # the two top-k break those ties differently (legal, SPEC §4; seen on the H200), which an
        # exact comparison cannot take.
        for cp, path, loss in ((2, "absorbed", "sparse"), (3, "explicit", "dense"), (2, "explicit", "off")):
            case, x = cp_case(cp, path, loss, relu=False)
            got = megatron_cp.run(case, x)
            case.cp = 1
            want = A.run(case, x)
            self.assertEqual(set(got), set(want) - {"scores"}, (cp, path, loss))
            for n in set(got):
                factor = cp if n in ("dq_I", "dk_I", "dw") and loss != "off" else 1
                if n == "topk":
                    np.testing.assert_array_equal(got[n], want[n])
                    continue
                fin = np.isfinite(want[n])
                np.testing.assert_array_equal(np.isfinite(got[n]), fin, err_msg=n)
                scale = max(1.0, float(np.max(np.abs(want[n][fin]), initial=0)))
                err = float(np.max(np.abs(got[n][fin] - factor * want[n][fin]), initial=0))
                self.assertLess(err, 1e-5 * scale * factor, "cp %d %s %s %s" % (cp, path, loss, n))

    def test_ranks_from_a_forkserver_give_the_forked_ranks_answers(self):
        # A worker that has used CUDA starts its ranks from a forkserver (autograd's device threads
        # make a forked rank's backward fail, as seen on the H200); the answers are the same.
        from dsa_parity.adapters import megatron_cp
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.skipTest("this process has used CUDA: a forked rank cannot (what the forkserver is for); "
                          "the forkserver's answers are checked against cp = 1 by the test above")
        case, x = cp_case(2)
        saved = os.environ.get("DSA_MEGATRON_CP_START")
        try:
            os.environ["DSA_MEGATRON_CP_START"] = "fork"
            forked = megatron_cp.run(case, x)
            os.environ["DSA_MEGATRON_CP_START"] = "forkserver"
            served = megatron_cp.run(case, x)
        finally:
            if saved is None:
                os.environ.pop("DSA_MEGATRON_CP_START", None)
            else:
                os.environ["DSA_MEGATRON_CP_START"] = saved
        self.assertEqual(set(forked), set(served))
        for n in forked:
            np.testing.assert_array_equal(forked[n], served[n], err_msg=n)

    def test_cp_runs_in_bf16_over_gloo(self):
        # gloo has no bf16: the gathers' shim moves bf16 as fp32 (exact); the outputs agree with
        # Megatron's bf16 cp = 1 answer to bf16 rounding (dc: summed across ranks in fp32 there).
        from dsa_parity.adapters import megatron as A
        from dsa_parity.adapters import megatron_cp
        case, x = cp_case(2, relu=False)  # no ReLU ties (see above)
        saved = A.DTYPE
        A.DTYPE = "bfloat16"
        try:
            got = megatron_cp.run(case, x)
            case.cp = 1
            want = A.run(case, x)
        finally:
            A.DTYPE = saved
        np.testing.assert_array_equal(got["topk"], want["topk"])
        for n in ("O", "O_lat", "lse", "kl", "loss", "dq_nope", "dc", "dW_UV"):
            scale = float(np.max(np.abs(want[n])))
            self.assertLess(float(np.max(np.abs(got[n] - want[n]))), 0.02 * scale + 1e-6, n)

    def test_a_rank_that_dies_or_hangs_ends_the_case_with_a_message(self):
        from dsa_parity.adapters import megatron_cp
        case, x = cp_case(2)
        saved = megatron_cp.FAULT, megatron_cp.TIMEOUT
        try:
            megatron_cp.FAULT = "die:1"
            with self.assertRaisesRegex(RuntimeError, "rank 1 of 2 died"):
                megatron_cp.run(case, x)
            megatron_cp.FAULT, megatron_cp.TIMEOUT = "hang:0", 5
            with self.assertRaisesRegex(RuntimeError, r"no answer within 5 s"):
                megatron_cp.run(case, x)
        finally:
            megatron_cp.FAULT, megatron_cp.TIMEOUT = saved
        import multiprocessing
        self.assertEqual(multiprocessing.active_children(), [])  # every rank process reaped


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
        # Every cp = 1 case without injected indices passes; masked pad rows and the contiguous CP
        # layout are cannot-run (never pass or fail); zigzag cp > 1 runs Megatron's CP
        # (test_cp_smoke_fuzz_gives_the_expected_verdicts).
        r, rep = report_of(["fuzz", "--profile", "smoke", "--cases", "40", "--corpus", "none", "--seed", "7"])
        for c in rep["cases"]:
            cp = c["case"].get("cp", {}).get("size", 1)
            injected = c["case"].get("init", {}).get("inject_indices", False)
            if c["case"].get("pad_rows") == "masked" or c["case"].get("cp", {}).get("layout") == "contiguous" and cp > 1:
                self.assertEqual(c["verdict"], "cannot-run", c)
            elif cp == 1 and not injected:
                self.assertEqual(c["verdict"], "pass", json.dumps(c)[:2000])
        self.assertGreaterEqual(verdicts(rep).count("pass"), 3, r.stdout)

    def test_cp_smoke_fuzz_gives_the_expected_verdicts(self):
        # cp 2 and 3 through Megatron's own CP (rank processes over gloo): a zigzag case without
        # injected indices passes every stage but the indexer gradients, which fail by the factor cp
        # (D5) when the loss is on and pass when it is off; contiguous is cannot-run. D4 (explicit,
        # one head, Dn = C) is a crash there as at cp = 1. No rank process outlives the harness.
        marker = "DSA_TEST_CP_MARKER_%d" % os.getpid()
        seen = {}
        for seed in (5,):  # seed 5 draws zigzag cp 2 and 3 cases without injected indices, and contiguous ones
            r, rep = report_of(["fuzz", "--profile", "smoke", "--cases", "40", "--corpus", "none", "--seed",
                                str(seed)], **{marker: "1"})
            for c in rep["cases"]:
                case, cp = c["case"], c["case"].get("cp", {}).get("size", 1)
                layout = case.get("cp", {}).get("layout", "zigzag")  # the report leaves defaults out
                if cp not in (2, 3) or case.get("pad_rows", "attend") == "masked":
                    continue
                if layout == "contiguous":
                    self.assertEqual(c["verdict"], "cannot-run", c)
                    self.assertIn("zigzag only", c["message"])
                    seen[(cp, layout)] = "cannot-run"
                    continue
                if case.get("init", {}).get("inject_indices", False):
                    continue  # D1-D3 apply as at cp = 1
                d = case["dims"]
                if case["path"] == "explicit" and d["H"] == 1 and d["Dn"] == d["C"]:
                    self.assertIn("requires up_v_weight", c["message"])
                    continue
                failed = {t["tensor"] for t in c.get("tensors", []) if t.get("status") == "fail"}
                if case["loss"]["mode"] == "off" or "loss_backward" not in case.get("stages", ["loss_backward"]):
                    self.assertEqual(c["verdict"], "pass", json.dumps(c)[:2000])
                else:
                    self.assertEqual(c["verdict"], "fail", json.dumps(c)[:2000])
                    self.assertTrue(failed and failed <= {"dq_I", "dk_I", "dw"}, json.dumps(c)[:3000])
                seen[(cp, layout)] = c["verdict"]
        self.assertEqual(processes_with(marker), [])
        for cp in (2, 3):
            self.assertIn((cp, "zigzag"), seen, seen)

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
        for name in ("contiguous_layout_cp2.json", "pad_rows_masked_loss.json"):
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
                  "explicit_duplicate_keys_counted_twice.json": ("fail", "mismatch"),
                  "cp_indexer_grad_times_cp.json": ("fail", "mismatch"),
                  "cp3_indexer_grad_times_cp.json": ("fail", "mismatch")}
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
