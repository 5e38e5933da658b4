"""The autopar Python module against the autopar binary: the same answers, dicts in and out.

Run by ctest (label python) with /usr/bin/python3, PYTHONPATH=build/python and
AUTOPAR_BINARY=build/autopar.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import autopar

BINARY = os.environ["AUTOPAR_BINARY"]


def cli(*args):
    """The binary's --json answer."""
    out = subprocess.run([BINARY, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


class Api(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="autopar-api-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def test_autotune_answers_as_the_command_line_does(self):
        best = autopar.autotune("gpt2-small", hw="dgx-a100-80g", output=self.dir + "/a")
        self.assertEqual(best["devices"], 8)
        self.assertTrue(os.path.exists(self.dir + "/a/manifest.yaml"))
        reference = cli("autotune", "gpt2-small", "--hw", "dgx-a100-80g", "-o", self.dir + "/b")
        self.assertEqual(best["best"]["scheme"], reference["best"]["scheme"])
        self.assertEqual(best["best"]["step_time_s"], reference["best"]["step_time_s"])
        self.assertEqual(best["candidates_evaluated"], reference["candidates_evaluated"])
        self.assertEqual([b["name"] for b in best["baselines"]], ["data parallel", "megatron"])

    def test_zoo_inspect_and_a_scheme_as_a_dict(self):
        model = self.dir + "/gpt.onnx"
        written = autopar.zoo("gpt-tiny", output=model)
        self.assertEqual(written["file"], model)
        summary = autopar.inspect(model)
        self.assertEqual(summary["params"], written["parameters"])
        self.assertEqual(summary, cli("inspect", model))

        scheme = {"mesh": {"dp": 2, "tp": 2}, "batch": {"global": 8}, "tensor": "megatron"}
        estimate = autopar.estimate("gpt-tiny", scheme=scheme, hw="dgx-a100-80g")
        path = self.dir + "/scheme.yaml"
        with open(path, "w") as f:
            json.dump(scheme, f)
        reference = cli("estimate", "gpt-tiny", "--scheme", path, "--hw", "dgx-a100-80g")
        self.assertEqual(estimate["step_time_s"], reference["step_time_s"])
        self.assertGreater(estimate["step_time_s"], 0)

    def test_transform_then_verify(self):
        plan = self.dir + "/plan"
        lowered = autopar.transform("gpt-tiny", scheme={"mesh": {"dp": 2, "tp": 2}}, output=plan,
                                    batch=8)
        self.assertEqual(lowered["devices"], 4)
        verified = autopar.verify(plan)
        self.assertTrue(verified["ok"])
        self.assertEqual(verified["devices"], 4)
        self.assertGreater(verified["compared"], 10)

    def test_errors_are_one_line(self):
        with self.assertRaises(autopar.Error) as raised:
            autopar.inspect(self.dir + "/missing.onnx")
        self.assertEqual(raised.exception.exit_code, 2)
        message = str(raised.exception)
        self.assertIn("missing.onnx", message)
        self.assertNotIn("\n", message)
        with self.assertRaises(autopar.Error) as raised:
            autopar.estimate("gpt-tiny", scheme={"mesh": {"dp": 2, "qp": 2}}, hw="dgx-a100-80g")
        self.assertIn("qp", str(raised.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
