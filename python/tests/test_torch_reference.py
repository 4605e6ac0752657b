"""The PyTorch example adapter (every stage, gradients by autograd) against the harness: smoke and
corpus-like cases pass, and each planted bug of the example (DSA_TORCH_BUG) is caught. Skipped
with a message where torch cannot be imported."""
import os
import subprocess
import sys
import unittest

from tests.helpers import binary, need_binary

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

need_torch = unittest.skipUnless(HAVE_TORCH, "torch is not importable (Debian: apt-get install python3-torch)")


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness(args, bug=""):
    env = dict(os.environ, PYTHONPATH=HERE, DSA_TORCH_BUG=bug)
    worker = "%s -m dsa_parity.examples.torch_reference" % sys.executable
    return subprocess.run([binary()] + args + ["--backend", "exec2:" + worker, "-q"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)


def fuzz(bug="", cases=6, seed=5):
    return harness(["fuzz", "--profile", "smoke", "--cases", str(cases), "--corpus", "none", "--seed", str(seed)], bug)


def replay(case_file, bug=""):
    return harness(["replay", os.path.join(os.path.dirname(HERE), "cases", case_file)], bug)


@need_torch
class UnitTest(unittest.TestCase):
    def test_key_set_counts_a_repeated_key_once(self):
        from dsa_parity.examples import torch_reference as ref
        visible = torch.tril(torch.ones(3, 3, dtype=torch.bool))
        index = torch.tensor([[0, 0, -1], [1, 1, 0], [2, 5, -7]])
        S = ref.key_set(index, visible)
        self.assertEqual(S.tolist(), [[True, False, False], [True, True, False], [False, False, True]])

    def test_empty_support_gives_zero_weights_and_minus_inf(self):
        from dsa_parity.examples import torch_reference as ref
        l = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
        P, lse = ref.masked_softmax(l, torch.tensor([[True, False], [False, False]]))
        self.assertEqual(P.tolist(), [[1.0, 0.0], [0.0, 0.0]])
        self.assertEqual(lse[1].item(), float("-inf"))
        (P.sum() + 0 * lse[0]).backward()
        self.assertFalse(torch.isnan(l.grad).any().item())


@need_torch
@need_binary
class FuzzTest(unittest.TestCase):
    def test_smoke_cases_pass_every_stage(self):
        r = fuzz()
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_planted_bugs_are_caught(self):
        for bug in ("softmax_scale", "relu_grad", "kl_N"):
            r = fuzz(bug, cases=12)
            self.assertEqual(r.returncode, 1, "%s was not caught:\n%s" % (bug, r.stdout))

    def test_repeated_keys_count_once(self):
        self.assertEqual(replay("edge/duplicate_injected_indices.json").returncode, 0)
        r = replay("edge/duplicate_injected_indices.json", "duplicates")
        self.assertEqual(r.returncode, 1, "S(g) as a multiset was not caught:\n" + r.stdout)


if __name__ == "__main__":
    unittest.main()
