import json
import os
import subprocess
import tempfile
import unittest

from dsa_parity import catalogue
from tests.helpers import binary, need_binary


@need_binary
class CatalogueTest(unittest.TestCase):
    def setUp(self):
        os.environ["DSA_PARITY_BIN"] = binary()
        os.environ.pop("DSA_PARITY_CATALOGUE", None)
        self.cat = catalogue.load()

    def test_reads_the_binary_catalogue(self):
        names = [t.name for t in self.cat.inputs()]
        self.assertEqual(names[:2], ["q_nope", "q_pe"])
        self.assertIn("topk", self.cat)
        self.assertEqual(self.cat["topk"].stage, "indexer")
        self.assertEqual(self.cat["lse"].shape({"H": 4}, 10, 8), (10, 4))
        self.assertEqual(self.cat["topk"].shape({}, 5, 8), (5, 5))  # K' = min(K, Tp)
        self.assertEqual(self.cat["loss"].shape({}, 5, 8), (1,))
        self.assertIn("loss", [t.name for t in self.cat.results_of(["loss"])])
        self.assertEqual(self.cat.stages[0], "indexer")

    def test_a_file_and_the_environment_work_too(self):
        out = subprocess.run([binary(), "catalogue", "--json"], check=True, stdout=subprocess.PIPE).stdout
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "catalogue.json")
            open(p, "wb").write(out)
            self.assertEqual(len(catalogue.load(p).tensors), len(self.cat.tensors))
            os.environ["DSA_PARITY_CATALOGUE"] = p
            try:
                self.assertEqual(len(catalogue.load().tensors), len(self.cat.tensors))
            finally:
                del os.environ["DSA_PARITY_CATALOGUE"]

    def test_refuses_other_json(self):
        with self.assertRaises(ValueError):
            catalogue.Catalogue(json.loads('{"format": "something/else"}'))


if __name__ == "__main__":
    unittest.main()
