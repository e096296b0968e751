"""Symbolic vs specialized: one module compiled with its batch dim kept symbolic, against a module compiled for
each batch size with --input-shape, and onnxruntime, timed interleaved on the same inputs.

Usage: python benchmarks/dynamic_shapes.py [--repeat 200] [--batch 1 --batch 8] [mlp] [cnn]
The models are the small ones the tests use (tests/dynamic_models.py).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import dynamic_models  # noqa: E402

import xcomp  # noqa: E402
from xcomp.bench import OnnxRuntimeBaseline, interleaved_samples  # noqa: E402

# name: (model with a symbolic batch dim, the shape of its input `x` after the batch dim)
MODELS = {"mlp": (dynamic_models.mlp("batch", sizes=(256, 512, 512, 10)), (256,)),
          "cnn": (dynamic_models.cnn("batch"), (3, 32, 32))}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", choices=[[], *MODELS], help="default: all")
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (default 1 and 8)")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for name in args.models or MODELS:
        model, rest = MODELS[name]
        symbolic = xcomp.compile(model)
        ort = OnnxRuntimeBaseline(model.SerializeToString())
        for batch in args.batch or [1, 8]:
            specialized = xcomp.compile(model, input_shapes={"x": (batch, *rest)})
            feed = dynamic_models.random_feed({"x": (batch, *rest)})
            np.testing.assert_allclose(symbolic(**feed), ort(feed)[0], rtol=1e-3, atol=1e-4)
            samples = interleaved_samples({"symbolic": lambda: symbolic(**feed),
                                           "specialized": lambda: specialized(**feed),
                                           "onnxruntime": lambda: ort(feed)},
                                          repeat=args.repeat, warmup=10, progress=False)
            med = {k: float(np.median(v)) for k, v in samples.items()}
            print(f"{name} batch {batch}: symbolic {med['symbolic']:.4f} ms  specialized {med['specialized']:.4f} ms "
                  f"(symbolic/specialized {med['symbolic'] / med['specialized']:.2f})  "
                  f"onnxruntime {med['onnxruntime']:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
