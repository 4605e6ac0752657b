"""The numpy example adapter against the harness: a few smoke cases through dsa-parity fuzz."""
import os
import subprocess
import sys
import unittest

import numpy as np

from dsa_parity.examples import numpy_reference as ref
from tests.helpers import binary, need_binary


class StreamTest(unittest.TestCase):
    def test_visibility(self):
        L = ref.Stream({"tp": 4, "cu_padded": [0, 2, 4], "real": [1, 0, 1, 1], "pad_rows": "masked"})
        self.assertEqual(list(L.visible(0)), [0])
        self.assertEqual(list(L.visible(1)), [])  # a masked pad row sees nothing
        self.assertEqual(list(L.visible(3)), [2, 3])

    def test_logsumexp_is_stable(self):
        self.assertAlmostEqual(float(ref.logsumexp(np.array([1000.0, 1000.0]))), 1000 + np.log(2))


@need_binary
class FuzzTest(unittest.TestCase):
    def test_smoke_cases_pass(self):
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=here)
        worker = "%s -m dsa_parity.examples.numpy_reference" % sys.executable
        r = subprocess.run([binary(), "fuzz", "--backend", "exec2:" + worker, "--profile", "smoke", "--cases", "5",
                            "--corpus", "none", "--seed", "3"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
