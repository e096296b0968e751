"""Greedy decoding with a KV cache: xcomp against onnxruntime on the same exported decoder step model.

Usage: python benchmarks/decode.py [--model gpt2] [--layers N] [--prompt 128] [--tokens 128] [--rounds 3]
           [--json out.json]

Needs torch and transformers besides xcomp (written with torch 2.13.0, transformers 4.46.3); nothing is
downloaded. The model, built from its transformers config with random weights (torch.manual_seed(0)):
- gpt2: GPT2LMHeadModel with the default config (12 layers, 12 heads of 64);
- llama_tiny: LlamaForCausalLM with benchmarks/zoo.py's tiny config (4 layers, 8 query heads sharing 2 key/value
  heads of 32, RMSNorm, rotary embeddings, SwiGLU).
It is exported once with the TorchScript exporter at opset 17 as one decoding step: input_ids [1, seq] and each
layer's past key and value [1, kv heads, past, head dim] in; logits [1, seq, vocab] and the present keys and
values [1, kv heads, past + seq, head dim] out, with seq and past symbolic. xcomp compiles it once, with both dims
symbolic, and the same module serves the prompt (seq = --prompt, an empty cache) and every decoding step (seq = 1).

A generation is the prompt (seeded random token ids) and then --tokens greedy steps, each feeding back the
runtime's own present keys and values and its own arg-max token. xcomp's and onnxruntime's generations take
turns, --rounds of each, each after a pause (xcomp.report.bench.SETTLE_S) that lets the other runtime's pool
threads stop spinning, and the table gives the medians: the prompt's latency, and decoding tokens per second
(steps over the time of all steps). The check: both runtimes must pick the same tokens, and xcomp's logits must
match onnxruntime's at the prompt within 1e-3 of their largest magnitude.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np

def _gpt2(layers):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=layers or 12, use_cache=True, attn_implementation="eager")
    return GPT2LMHeadModel(config), config.n_head, config.n_embd // config.n_head, config.vocab_size


def _llama_tiny(layers):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, num_hidden_layers=layers or 4, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=688, vocab_size=32000, use_cache=True, attn_implementation="eager")
    return LlamaForCausalLM(config), 2, 256 // 8, config.vocab_size


MODELS = {"gpt2": _gpt2, "llama_tiny": _llama_tiny}  # -> (model, key/value heads, head dim, vocabulary)


def export(path: str, name: str, layers: int | None) -> tuple:
    """The model's decoding step (see the module doc) as an ONNX file at `path`; returns (layers, key/value heads,
    head dim, vocabulary)."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import zoo

    zoo._torchvision()  # transformers imports torchvision where it is installed: its workaround comes first
    from transformers import DynamicCache

    torch.manual_seed(0)
    model, heads, head_dim, vocab = MODELS[name](layers)
    model.eval()
    layers = model.config.num_hidden_layers

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *past):
            cache = DynamicCache.from_legacy_cache(tuple((past[2 * i], past[2 * i + 1]) for i in range(layers)))
            out = self.model(input_ids, past_key_values=cache, use_cache=True)
            present = out.past_key_values
            present = present.to_legacy_cache() if hasattr(present, "to_legacy_cache") else present
            return (out.logits, *[t for kv in present for t in kv])

    names_in = ["input_ids"] + cache_names("past", layers)
    names_out = ["logits"] + cache_names("present", layers)
    axes = {"input_ids": {1: "seq"}, "logits": {1: "seq"}}
    axes.update({name: {2: "past"} for name in names_in[1:]})
    axes.update({name: {2: "total"} for name in names_out[1:]})
    example = (torch.randint(0, vocab, (1, 2)), *[torch.randn(1, heads, 3, head_dim) for _ in range(2 * layers)])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's warnings and transformers' legacy-cache notice
        torch.onnx.export(Step(), example, path, opset_version=17, dynamo=False, input_names=names_in,
                          output_names=names_out, dynamic_axes=axes, do_constant_folding=True)
    return layers, heads, head_dim, vocab


def cache_names(prefix: str, layers: int) -> list:
    return [f"{prefix}_{kind}_{i}" for i in range(layers) for kind in ("k", "v")]


def empty_cache(layers: int, heads: int, head_dim: int) -> dict:
    return {name: np.zeros((1, heads, 0, head_dim), np.float32) for name in cache_names("past", layers)}


def generate(step, prompt: np.ndarray, tokens: int, cache: dict) -> dict:
    """Greedy generation with `step(feed) -> [logits, present k/v ...]` from the prompt and an empty `cache`:
    {prompt_ms, decode_s, tokens, logits}."""
    names = list(cache)
    start = time.perf_counter()
    outputs = step({"input_ids": prompt, **cache})
    prompt_ms = (time.perf_counter() - start) * 1e3
    first_logits = outputs[0]
    chosen = []
    start = time.perf_counter()
    for _ in range(tokens):
        token = int(np.argmax(outputs[0][0, -1]))
        chosen.append(token)
        cache = dict(zip(names, outputs[1:]))
        outputs = step({"input_ids": np.array([[token]], np.int64), **cache})
    return {"prompt_ms": prompt_ms, "decode_s": time.perf_counter() - start, "tokens": chosen,
            "logits": first_logits}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=list(MODELS), default="gpt2", help="the decoder (default gpt2)")
    parser.add_argument("--layers", type=int, help="decoder blocks (default: the config's, 12 for gpt2, 4 for "
                                                   "llama_tiny)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("--tokens", type=int, default=128, help="decoded tokens per generation (default 128)")
    parser.add_argument("--rounds", type=int, default=3, help="generations of each runtime, in turns (default 3)")
    parser.add_argument("--json", help="also write the result as JSON here")
    args = parser.parse_args()

    import onnxruntime as ort

    import xcomp
    from xcomp.report.bench import SETTLE_S

    with tempfile.TemporaryDirectory(prefix="xcomp-decode-") as folder:
        path = os.path.join(folder, f"{args.model}_step.onnx")
        layers, heads, head_dim, vocab = export(path, args.model, args.layers)
        start = time.perf_counter()
        module = xcomp.compile(path, progress=False)
        compile_s = time.perf_counter() - start
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in module.outputs]

    def xcomp_step(feed):
        outputs = module.run(feed)
        return [outputs[name] for name in names]

    runtimes = {"xcomp": xcomp_step, "onnxruntime": lambda feed: session.run(None, feed)}
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt)).astype(np.int64)
    runs = {name: [] for name in runtimes}
    for name, step in runtimes.items():  # warm-up: the first call creates the VM / session state
        step({"input_ids": prompt[:, :1], **empty_cache(layers, heads, head_dim)})
    for _ in range(args.rounds):
        for name, step in runtimes.items():
            time.sleep(SETTLE_S)  # without it, the prompt shares the cores with the last runtime's spinning threads
            runs[name].append(generate(step, prompt, args.tokens, empty_cache(layers, heads, head_dim)))
    ours, theirs = runs["xcomp"][0], runs["onnxruntime"][0]
    diff = float(np.max(np.abs(ours["logits"] - theirs["logits"])) / np.max(np.abs(theirs["logits"])))
    same_tokens = ours["tokens"] == theirs["tokens"]
    result = {"model": args.model, "layers": layers, "prompt": args.prompt, "tokens": args.tokens,
              "rounds": args.rounds, "compile_s": compile_s, "relative_diff": diff, "same_tokens": same_tokens}
    for name, generations in runs.items():
        result[f"{name}_prompt_ms_each"] = [g["prompt_ms"] for g in generations]
        result[f"{name}_decode_tokens_per_s_each"] = [args.tokens / g["decode_s"] for g in generations]
        result[f"{name}_prompt_ms"] = float(np.median(result[f"{name}_prompt_ms_each"]))
        result[f"{name}_decode_tokens_per_s"] = float(np.median(result[f"{name}_decode_tokens_per_s_each"]))
    print(f"{args.model}, {layers} layers; compiled once in {compile_s:.1f} s with seq and past symbolic")
    print(f"{'runtime':12s} {'prompt ms':>10s} {'decode tok/s':>13s}")
    for name in runtimes:
        print(f"{name:12s} {result[f'{name}_prompt_ms']:10.1f} {result[f'{name}_decode_tokens_per_s']:13.1f}")
    print(f"check: prompt logits within {diff:.1e} of onnxruntime's largest; same {args.tokens} tokens: "
          f"{'yes' if same_tokens else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same_tokens and diff <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
