"""xcomp against onnxruntime on well-known architectures, built from library configs with random weights.

Usage: python benchmarks/zoo.py [--repeat 30] [--json out.json] [--timeout 1800] [--dynamo] [--tune 20m] [model ...]
(default: every model)

Needs torch, torchvision and transformers (written with torch 2.13.0, torchvision 0.28.0, transformers 4.46.3)
besides xcomp; --dynamo also needs onnxscript (0.7.2). Nothing is downloaded: every model is built from its
library's config (transformers) or constructor (torchvision, weights=None) with torch.manual_seed(0) before it,
so its weights are the library's random initialization.

Models: GPT-2 (GPT2LMHeadModel, logits), BERT-base, DistilBERT (last hidden state), ViT-base (224x224), a Whisper
encoder with whisper-tiny's dims (80 mel bins x 3000 frames), a tiny Llama (GQA, RMSNorm, RoPE, SwiGLU; logits),
all with eager attention, batch 1 and 128 tokens; and torchvision's mobilenet_v2, mobilenet_v3_small,
efficientnet_b0, regnet_y_400mf, resnet50 and convnext_tiny, batch 1 at 224x224. Each is exported to ONNX in a
temporary folder (opset 17 with the TorchScript exporter; --dynamo: torch's default, dynamo-based exporter at its
own opset), static shapes, one input and one output.

Each model is then measured by `xcomp bench MODEL --baseline onnxruntime --json` in its own subprocess: it compiles the
model for this CPU (the compile seconds), runs xcomp and onnxruntime on the same seeded random inputs
(Module.random_inputs: standard-normal images and features, token ids 0-3), and times both in alternating blocks
(xcomp.report.bench.alternating_blocks, --repeat steady runs each); the table shows their medians and xcomp /
onnxruntime (< 1: xcomp is faster). A model matches when the largest absolute difference of the outputs, over the
largest absolute value of onnxruntime's output, is at most 1e-3; a model that fails to export, compile or match gets its
row with the reason and the others still run.

--tune TIME first benches the model untuned as above, then runs `xcomp tune MODEL --time TIME` on it (a fresh
database per model) and benches it again with `--db`: the row adds the tuning seconds, the tuned build's and
onnxruntime's medians from that second run, and their ratio (the issue's target: 0.8 after 20 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import warnings

import torch

SEED = 0
SEQ = 128
TOLERANCE = 1e-3  # largest |xcomp - onnxruntime| over largest |onnxruntime|


def _torchvision():
    """torchvision, imported. PyPI's torchvision wheel is built for CUDA torch: beside a CPU-only torch its C ops
    (nms, roi_align, ...) do not load and its import fails registering their meta kernels; the models here use
    none of them, so that registration module is skipped then."""
    try:
        import torchvision
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            raise
        for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[key]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


class OneOutput(torch.nn.Module):
    """A transformers model whose forward returns one tensor (the ONNX model's one output) instead of a dict."""

    def __init__(self, model, field):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, x):
        return getattr(self.model(x), self.field)


def _tokens(vocab):
    return torch.randint(0, vocab, (1, SEQ), dtype=torch.int64)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(use_cache=False, attn_implementation="eager")
    return OneOutput(GPT2LMHeadModel(config), "logits"), _tokens(config.vocab_size), "input_ids"


def _bert_base():
    from transformers import BertConfig, BertModel

    config = BertConfig(attn_implementation="eager")
    return OneOutput(BertModel(config), "last_hidden_state"), _tokens(config.vocab_size), "input_ids"


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(attn_implementation="eager")
    return OneOutput(DistilBertModel(config), "last_hidden_state"), _tokens(config.vocab_size), "input_ids"


def _vit_base():
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(attn_implementation="eager")  # ViT-base/16 at 224x224
    return (OneOutput(ViTModel(config), "last_hidden_state"), torch.randn(1, 3, 224, 224), "pixel_values")


def _whisper_tiny_encoder():
    from transformers import WhisperConfig, WhisperModel

    config = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                           decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                           max_source_positions=1500, use_cache=False, attn_implementation="eager")
    # The encoder only takes 2 x max_source_positions frames (30 s of audio), whatever the text length.
    features = torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions)
    return OneOutput(WhisperModel(config).encoder, "last_hidden_state"), features, "input_features"


def _llama_tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=688, vocab_size=32000, use_cache=False, attn_implementation="eager")
    return OneOutput(LlamaForCausalLM(config), "logits"), _tokens(config.vocab_size), "input_ids"


def _vision(name):
    def build():
        return getattr(_torchvision().models, name)(weights=None), torch.randn(1, 3, 224, 224), "images"
    return build


MODELS = {
    "gpt2": _gpt2,
    "bert_base": _bert_base,
    "distilbert": _distilbert,
    "vit_base": _vit_base,
    "whisper_tiny_encoder": _whisper_tiny_encoder,
    "llama_tiny": _llama_tiny,
    **{name: _vision(name) for name in ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf",
                                        "resnet50", "convnext_tiny")},
}


def export(name, folder, dynamo=False):
    """The model's ONNX file in `folder`, its weights seeded."""
    try:
        _torchvision()  # transformers imports torchvision where it is installed, so the workaround must come first
    except ImportError:
        pass
    torch.manual_seed(SEED)  # before building, so a model's weights do not depend on which models ran before it
    model, example, input_name = MODELS[name]()
    model.eval()
    path = os.path.join(folder, f"{name}.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's warnings about shapes taken as constants: they are static
        if dynamo:
            # external_data=False: xcomp bench and onnxruntime then read one self-contained file, as with opset 17.
            torch.onnx.export(model, (example,), path, input_names=[input_name], output_names=["output"],
                              dynamo=True, external_data=False, verbose=False)  # no progress lines in the table
        else:
            torch.onnx.export(model, (example,), path, opset_version=17, dynamo=False, input_names=[input_name],
                              output_names=["output"], do_constant_folding=True)
    return path


def _reference_scale(path, report):
    """Largest |output| of onnxruntime on the inputs the bench ran (Module.random_inputs on the model's signature
    with the report's seed): the bench reports the absolute difference only."""
    import numpy as np
    import onnxruntime as ort

    from xcomp.frontends.onnx import TensorSpec
    from xcomp.runtime.module import Module

    specs = [TensorSpec.from_dict(d) for d in report["model"]["inputs"]]
    inputs = Module.random_inputs(types.SimpleNamespace(inputs=specs, bound_inputs=[]), report["settings"]["seed"])
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return float(max(np.max(np.abs(out)) for out in session.run(None, inputs)))


def bench(path, repeat, timeout_s, db=None):
    """One row from `xcomp bench --json` in a subprocess, so one model's memory and threads do not sway the next;
    with `db`, the model compiled with its tuned configs."""
    report = json.loads(_xcomp(["bench", path, "--baseline", "onnxruntime", "--json", "-q", "--repeat", str(repeat),
                                *(["--db", db] if db else [])], timeout_s, "compile and both runtimes"))
    target = report["targets"][0]
    ort = next(b for b in report["baselines"] if b["name"] == "onnxruntime")
    if ort["status"] != "measured":
        raise RuntimeError(f"onnxruntime {ort['status']}: {ort.get('reason', '')}")
    diff = target["check"]["max_abs_diff"]
    scale = _reference_scale(path, report)
    row = {"compile_s": target["first_run"]["compile_s"], "xcomp_ms": target["latency"]["median_ms"],
           "onnxruntime_ms": ort["latency"]["median_ms"],
           "ratio": target["latency"]["median_ms"] / ort["latency"]["median_ms"], "max_abs_diff": diff,
           "reference_max_abs": scale, "relative_diff": diff / scale if scale > 0 else diff,
           # the baseline moves with its version (a new checkout takes the newest onnxruntime): ratios from runs
           # with different versions are not comparable
           "versions": {k: report["versions"][k] for k in ("onnxruntime", "tvm", "onnx", "numpy")}}
    if row["relative_diff"] > TOLERANCE:
        row["error"] = (f"mismatch: max |xcomp - onnxruntime| {diff:.3g} is {row['relative_diff']:.2g} of the "
                        f"largest |output| {scale:.3g} (> {TOLERANCE:g})")
    return row


def _xcomp(args: list, timeout_s, what: str) -> str:
    """The stdout of `xcomp ARGS` in a subprocess; its last error line, or the timeout (`what` it ran), raised."""
    try:
        proc = subprocess.run([sys.executable, "-m", "xcomp", *args], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"xcomp {args[0]} did not finish in {timeout_s:g} s ({what})") from None
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"xcomp {args[0]} failed")
    return proc.stdout


def tune(path, budget: str, db: str, timeout_s) -> float:
    """`xcomp tune` on the model for `budget` (e.g. "20m") into `db`, in a subprocess; its wall seconds.
    `timeout_s` is on top of the budget: the tuner's last step runs after it."""
    from xcomp.cli import _parse_duration

    start = time.monotonic()
    _xcomp(["tune", path, "--time", budget, "--db", db, "-q"], _parse_duration(budget) + timeout_s,
           f"{budget} of tuning and its in-model step")
    return time.monotonic() - start


def tuned_row(path, budget, folder, repeat, timeout_s) -> dict:
    """The tuning seconds and the tuned build against onnxruntime in a bench of their own."""
    db = os.path.join(folder, os.path.basename(path) + ".sqlite")
    seconds = tune(path, budget, db, timeout_s)
    row = bench(path, repeat, timeout_s, db)
    fields = {"tune_s": seconds, "tuned_ms": row["xcomp_ms"], "tuned_onnxruntime_ms": row["onnxruntime_ms"],
              "tuned_ratio": row["ratio"]}
    return {**fields, "tuned_error": row["error"]} if "error" in row else fields


def _one_line(err):
    """The error's first line, and that of the error that caused it (a wrapped import error says little itself)."""
    def line(e):
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"

    root = err
    while root.__cause__ or root.__context__:
        root = root.__cause__ or root.__context__
    return line(err) if root is err else f"{line(err)} (from {line(root)})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", metavar="model", help=f"models to run (default: all): {', '.join(MODELS)}")
    parser.add_argument("--repeat", type=int, default=30, help="timed steady runs of each runtime (default 30)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds one model's bench may take, and its tuning past the --tune budget (default 1800)")
    parser.add_argument("--tune", metavar="TIME", help="also tune each model for TIME (xcomp tune --time, e.g. 20m) "
                        "and bench its tuned build")
    parser.add_argument("--dynamo", action="store_true",
                        help="export with torch's default (dynamo) exporter instead of the TorchScript one at opset 17")
    args = parser.parse_args()
    if args.tune:  # a bad budget said now, not after the first model's untuned bench
        from xcomp.cli import _parse_duration
        from xcomp.errors import UserError

        try:
            _parse_duration(args.tune)
        except UserError as err:
            parser.error(f"--tune passes {err}")
    unknown = [n for n in args.models if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    names = args.models or list(MODELS)
    rows = []
    print(f"{'model':22s} {'compile s':>9s} {'xcomp ms':>10s} {'ort ms':>10s} {'ratio':>6s}  check "
          "(ratio: xcomp / onnxruntime)", flush=True)
    with tempfile.TemporaryDirectory(prefix="xcomp-zoo-") as folder:
        for name in names:
            row = {"model": name}
            try:
                path = export(name, folder, args.dynamo)
            except Exception as err:  # one model's failure must not hide the others' rows
                row["error"] = f"export: {_one_line(err)}"
            else:
                try:
                    row.update(bench(path, args.repeat, args.timeout))
                except Exception as err:
                    row["error"] = f"bench: {_one_line(err)}"
                if args.tune and "error" not in row:
                    try:
                        row.update(tuned_row(path, args.tune, folder, args.repeat, args.timeout))
                    except Exception as err:
                        row["tuned_error"] = f"tuned: {_one_line(err)}"
                os.remove(path)  # the larger models' files add up to gigabytes
            rows.append(row)
            if "xcomp_ms" in row:
                check = row.get("error", f"ok ({row['relative_diff']:.1e})")
                print(f"{name:22s} {row['compile_s']:9.1f} {row['xcomp_ms']:10.2f} {row['onnxruntime_ms']:10.2f} "
                      f"{row['ratio']:6.2f}  {check}", flush=True)
                if "tuned_ms" in row:
                    print(f"{'  tuned ' + format(row['tune_s'], '.0f') + ' s':22s} {'':9s} {row['tuned_ms']:10.2f} "
                          f"{row['tuned_onnxruntime_ms']:10.2f} {row['tuned_ratio']:6.2f}  "
                          f"{row.get('tuned_error', 'ok')}", flush=True)
                elif "tuned_error" in row:
                    print(f"{'  tuned':22s} ERROR {row['tuned_error']}", flush=True)
            else:
                print(f"{name:22s} ERROR {row['error']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r or "tuned_error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
