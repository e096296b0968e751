"""Symbolic vs specialized: one module compiled with its batch (and sequence) dims kept symbolic, against a module
compiled for each size with --input-shape, and onnxruntime, timed in alternating blocks on the same inputs.

Usage: python benchmarks/dynamic_shapes.py [--repeat 200] [--batch 1 --batch 8] [mlp] [cnn] [encoder]
mlp and cnn are the small models the tests use (tests/dynamic_models.py); encoder is the torch-exported
transformer encoder of tests/models (symbolic batch and sequence, run at sequence length 32).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
sys.path.insert(0, TESTS)

import dynamic_models  # noqa: E402
import onnx  # noqa: E402

import xcomp  # noqa: E402
from xcomp.report.bench import OnnxRuntimeBaseline, alternating_blocks  # noqa: E402

ENCODER_SEQ = 32


def _encoder_feed(batch):
    rng = np.random.default_rng(batch)
    return {"input_ids": rng.integers(0, 100, size=(batch, ENCODER_SEQ), dtype=np.int64),
            "attention_mask": np.ones((batch, ENCODER_SEQ), np.int64)}


# name: (model with symbolic dims, batch size -> feed)
MODELS = {
    "mlp": (lambda: dynamic_models.mlp("batch", sizes=(256, 512, 512, 10)),
            lambda batch: dynamic_models.random_feed({"x": (batch, 256)})),
    "cnn": (lambda: dynamic_models.cnn("batch"), lambda batch: dynamic_models.random_feed({"x": (batch, 3, 32, 32)})),
    "encoder": (lambda: onnx.load(os.path.join(TESTS, "models", "encoder_op17.onnx")), _encoder_feed),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", choices=[[], *MODELS], help="default: all")
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (default 1 and 8)")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for name in args.models or MODELS:
        make_model, make_feed = MODELS[name]
        model = make_model()
        symbolic = xcomp.compile(model)
        ort = OnnxRuntimeBaseline(model.SerializeToString())
        for batch in args.batch or [1, 8]:
            feed = make_feed(batch)
            specialized = xcomp.compile(model, input_shapes={k: v.shape for k, v in feed.items()})
            for got, want in zip(symbolic.run(feed).values(), ort(feed)):
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
            runners = {"symbolic": lambda: symbolic(**feed), "specialized": lambda: specialized(**feed),
                       "onnxruntime": lambda: ort(feed)}
            samples, _after_switch = alternating_blocks(runners, repeat=args.repeat, warmup=10)
            med = {k: float(np.median(v)) for k, v in samples.items()}
            print(f"{name} batch {batch}: symbolic {med['symbolic']:.4f} ms  specialized {med['specialized']:.4f} ms "
                  f"(symbolic/specialized {med['symbolic'] / med['specialized']:.2f})  "
                  f"onnxruntime {med['onnxruntime']:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
