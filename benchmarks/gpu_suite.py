"""The GPU benchmark suite: xcomp against cuBLAS and torch on one NVIDIA GPU, in one call of a lent machine.

Usage: python benchmarks/gpu_suite.py --out DIR [--budget-s 300] [--commit SHA] [--only WORD ...] [--dry-run]

GEMMs: x[m, k] @ w[k, n] as a one-node ONNX model with both operands as inputs, compiled by xcomp.compile for the
visible GPU (the same path a user takes) and timed by Module.benchmark, against torch.matmul (cuBLAS) on the same
arrays, timed with CUDA events; the float32 GEMM once more with xcomp's --tf32 beside cuBLAS TF32
(torch.backends.cuda.matmul.allow_tf32). Knob sweeps: the fp16 GEMM's group alone at the matrix-core template's
default config, with each other count of 1-4 cp.async pipeline stages, the block tiles 64 x 64 (2 stages),
128 x 128 and 128 x 256 (64 x 64 warp tiles, 3 stages, past the 48 KiB of shared memory a block gets without
opting in) where they are not the default, and the best of --trials random ones, each checked in the model.
Models: torchvision's resnet50 and transformers' BERT-base (seq 128)
with seeded random weights, exported to ONNX (opset 17, the legacy exporter); xcomp runs them with and without its
CUDA graphs (cuda_graph=True), torch in eager mode, through torch.compile and through torch.compile(mode=
"reduce-overhead") (CUDA graphs). Attention: softmax(q k^T / sqrt(64)) v, causal too, float16, 12 heads, seq 128 to
2048, as the ops transformers' eager attention exports, against torch's scaled_dot_product_attention. Every xcomp
result is checked against torch's before it is timed (the models' on two inputs); a mismatch is recorded as an
error and its time is not reported.

Steps run in priority order while the budget lasts; DIR/gpu_suite.json is rewritten after each, in the shape of
benchmarks/results/gpu/ (see docs/gpu-results.md), so a call cut short still returns what it measured. The generated
CUDA C, PTX and `ptxas -v` (registers, spills) of each GEMM go under DIR too. --dry-run compiles the GEMMs for
cuda:sm_90 without running anything and writes the JSON with null timings: the rehearsal without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/gemm.py's search

# (m, n, k, dtype[, math]): math "tf32" compiles with tf32=True and times cuBLAS with allow_tf32 (cuBLAS TF32)
GEMMS = [(4096, 4096, 4096, "float16"), (8192, 8192, 8192, "float16"), (4096, 4096, 4096, "bfloat16"),
         (4096, 4096, 4096, "float32"), (4096, 4096, 4096, "float32", "tf32"), (1024, 1024, 1024, "float16")]
SWEEPS = [(4096, 4096, 4096, "float16")]
# in the order a cut budget should spare them: BERT has the fewest runs so far, float32 resnet50 the most
MODELS = [("bert-base", "float16"), ("resnet50", "float16"), ("resnet50", "float32")]
# (heads, seq, head_dim, causal), float16, batch 1: the attention target against torch's SDPA
ATTENTIONS = [(12, 128, 64, False), (12, 512, 64, False), (12, 2048, 64, False), (12, 2048, 64, True)]
TORCH_MODES = {"torch_eager_ms": None, "torch_compile_ms": "default", "torch_reduce_overhead_ms": "reduce-overhead"}
SEED = 0


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def gemm_model(m, n, k, dtype):
    from onnx import TensorProto, helper

    elem = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT}[dtype]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", elem, [m, k]),
                               helper.make_tensor_value_info("w", elem, [k, n])],
                              [helper.make_tensor_value_info("y", elem, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def emit_code(module, folder):
    """Write the module's CUDA C and PTX, and ptxas -v's register/spill lines for its kernels."""
    os.makedirs(folder, exist_ok=True)
    paths = module.emit_sources(folder)
    ptx = [p for p in paths if p.endswith(".ptx")]
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not ptx or not os.path.exists(ptxas):
        return None
    arch = module.spec.arch if hasattr(module.spec, "arch") else "sm_90"
    proc = subprocess.run([ptxas, "-v", f"-arch={arch}", ptx[0], "-o", os.devnull], capture_output=True, text=True)
    lines = [line for line in proc.stderr.splitlines() if "registers" in line or "spill" in line]
    with open(os.path.join(folder, "ptxas-v.txt"), "w") as f:
        f.write(proc.stderr)
    return lines


def cuda_time_ms(fn, warmup=3, repeat=20):
    """Median of `repeat` single calls, each between two CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return float(np.median(samples))


def torch_dtype(dtype):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]


def relative_error(ours, reference):
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    return float(np.max(np.abs(ours - reference)) / max(np.max(np.abs(reference)), 1e-30))


def run_gemm(m, n, k, dtype, out_dir, dry_run, math=None):
    """One GEMM row. math "tf32" (a float32 GEMM): xcomp with tf32=True against cuBLAS with TF32 allowed, both
    checked against the plain float32 product; the row's "math" is what xcomp's build reports it used."""
    import xcomp

    tf32 = math == "tf32"
    row = {"m": m, "n": n, "k": k, "dtype": dtype}
    t = time.monotonic()
    module = xcomp.compile(gemm_model(m, n, k, dtype), target="cuda:sm_90" if dry_run else "cuda", tf32=tf32)
    row["xcomp_compile_s"] = round(time.monotonic() - t, 1)
    if dtype == "float32":
        row["math"] = module.info["float32_math"]
    row["ptxas"] = emit_code(module, os.path.join(out_dir, f"gemm_{m}x{n}x{k}_{dtype}" + ("_tf32" if tf32 else "")))
    if dry_run:
        return {**row, "xcomp_tflops": None, "cublas_tflops": None}
    import torch

    rng = np.random.default_rng(SEED)
    x = torch.from_numpy(rng.standard_normal((m, k), dtype=np.float32)).to("cuda", torch_dtype(dtype))
    w = torch.from_numpy(rng.standard_normal((k, n), dtype=np.float32)).to("cuda", torch_dtype(dtype))
    host_dtype = dtype
    if dtype == "bfloat16":  # numpy has none of its own; TVM takes ml_dtypes' (a TVM dependency)
        import ml_dtypes

        host_dtype = ml_dtypes.bfloat16
    inputs = {"x": x.float().cpu().numpy().astype(host_dtype), "w": w.float().cpu().numpy().astype(host_dtype)}
    reference = torch.matmul(x, w).float().cpu().numpy()
    row["max_rel_error"] = relative_error(module(inputs["x"], inputs["w"]), reference)
    flop = 2.0 * m * n * k
    row["xcomp_tflops"] = flop / (module.benchmark(inputs, repeat=20)["median_ms"] * 1e-3) / 1e12
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32  # cuBLAS TF32 beside xcomp's tf32, plain fp32 beside fp32
    try:
        row["cublas_tflops"] = flop / (cuda_time_ms(lambda: torch.matmul(x, w)) * 1e-3) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    # tf32 keeps 10 mantissa bits per operand: over K = 4096 random terms about 1e-4 of the largest output
    tolerance = 1e-2 if dtype != "float32" else 2e-3 if tf32 else 1e-4
    if row["max_rel_error"] > tolerance:
        row["error"] = f"wrong result: max error {row['max_rel_error']:.3g} of the largest output (> {tolerance})"
        row["xcomp_tflops"] = None
    return row


def attention_model(heads, seq, head_dim, causal):
    """softmax(q k^T / sqrt(head_dim) [causal: -inf past the query's own key]) v in float16, q, k, v [1, heads,
    seq, head_dim] inputs: the ops transformers' eager attention exports, which xcomp compiles as it finds them."""
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, heads, seq, head_dim]
    scale = numpy_helper.from_array(np.array(head_dim ** -0.5, np.float16), "scale")
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Mul", ["scores", "scale"], ["logits"])]
    constants = [scale]
    if causal:
        constants += [numpy_helper.from_array(np.tril(np.ones((seq, seq), bool)), "visible"),
                      numpy_helper.from_array(np.array(-np.inf, np.float16), "hidden")]
        nodes.append(helper.make_node("Where", ["visible", "logits", "hidden"], ["masked"]))
    nodes += [helper.make_node("Softmax", [nodes[-1].output[0]], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT16, shape) for n in "qkv"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, shape)], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_attention(heads, seq, head_dim, causal, dry_run):
    """One attention row: xcomp's build of attention_model against torch's scaled_dot_product_attention (flash or
    memory-efficient kernels, whichever torch picks) on the same arrays, both checked against float32 math."""
    import xcomp

    row = {"heads": heads, "seq": seq, "head_dim": head_dim, "dtype": "float16", "causal": causal, "batch": 1}
    t = time.monotonic()
    module = xcomp.compile(attention_model(heads, seq, head_dim, causal), target="cuda:sm_90" if dry_run else "cuda")
    row["xcomp_compile_s"] = round(time.monotonic() - t, 1)
    row["groups"] = [{"name": g.name, "kind": g.kind, "count": g.count} for g in module.groups]
    if dry_run:
        return {**row, "xcomp_ms": None, "sdpa_ms": None}
    import torch

    from xcomp.report.profile import profile_module

    rng = np.random.default_rng(SEED)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, heads, seq, head_dim), dtype=np.float32)).to(
        "cuda", torch.float16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    reference = sdpa(q.float(), k.float(), v.float(), is_causal=causal)
    inputs = {name: tensor.cpu().numpy() for name, tensor in zip("qkv", (q, k, v))}
    row["max_rel_error"] = relative_error(module(*inputs.values()), reference.cpu().numpy())
    row["xcomp_ms"] = module.benchmark(inputs, repeat=20)["median_ms"]
    row["sdpa_ms"] = cuda_time_ms(lambda: sdpa(q, k, v, is_causal=causal))
    row["sdpa_max_rel_error"] = relative_error(sdpa(q, k, v, is_causal=causal).float().cpu().numpy(),
                                               reference.cpu().numpy())
    if row["max_rel_error"] > 1e-2:
        row["error"] = f"wrong result: max error {row['max_rel_error']:.3g} of the largest output (> 1e-2)"
        row["xcomp_ms"] = None
    else:  # where the time goes: the scores, the softmax and the product with v are groups of their own
        row["groups"] = [g.to_dict() for g in profile_module(module, repeat=5, progress=False)]
    return row


def random_search(template, backend, trials: int, seed: int):
    """The best of the default and `trials` random valid configs, each timed alone once, the top three again:
    the knobs' reach on this GPU, with no cost model in between."""
    import random

    from xcomp.report.profile import time_func

    def ms(knobs, repeat, min_repeat_ms):
        try:
            return float(np.median(time_func(template.schedule(knobs), backend, repeat, min_repeat_ms)))
        except Exception:  # noqa: BLE001 - a config that fails to build or launch loses the search
            return float("inf")

    candidates = [template.default_knobs()]
    pool = list(template.enumerate())
    random.Random(seed).shuffle(pool)
    candidates += [c for c in pool if c not in candidates][:trials]
    timed = sorted(((ms(knobs, 3, 20), n) for n, knobs in enumerate(candidates)))
    finals = [(min(ms(candidates[n], 5, 50) for _ in range(2)), n) for _, n in timed[:3]]
    return candidates[min(finals)[1]]


def run_knob_sweep(m, n, k, dtype, trials, dry_run):
    """The matrix-core template's default config, the same with each other count of 1-4 pipeline stages, two
    larger block tiles, and the best of `trials` random configs (random_search, timing the group alone). Each named
    config is then built into the whole one-GEMM model and checked against torch before its time counts: a fast
    wrong config must not look like a gain."""
    from xcomp.backends import get_backend
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.report.profile import time_func
    from xcomp.schedules import get_template

    backend = get_backend("cuda:sm_90" if dry_run else "cuda")
    _, groups = partition(load_onnx(gemm_model(m, n, k, dtype)).mod, backend.spec, [])
    (group,) = [g for g in groups if g.kind == "matmul"]
    template = get_template(group.func, backend.schedule_context())
    default = template.default_knobs()
    named = {"default": default, **{f"stages_{n_}": {**default, "stages": n_} for n_ in (1, 2, 3, 4)
                                    if n_ != default["stages"]}}
    named["block_64x64"] = {**default, "warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "stages": 2}
    for warps_n in (2, 4):  # the tiles the opted-in shared memory opens (block 128 x 64 * warps_n)
        named[f"block_128x{64 * warps_n}"] = {**default, "warps_m": 2, "warps_n": warps_n, "frags_m": 4,
                                              "frags_n": 4, "stages": 3}
    named = {name: knobs for name, knobs in named.items()
             if template.valid(knobs) and (name == "default" or knobs != default)}
    row = {"m": m, "n": n, "k": k, "dtype": dtype, "template": type(template).__name__,
           "default_knobs": default, "trials": trials}
    if dry_run:
        for knobs in list(named.values()) + list(template.enumerate())[:trials]:
            backend.compile(template.schedule(knobs).with_attr("global_symbol", "main"))
        return row
    named["best_random"] = random_search(template, backend, trials, SEED)
    row["configs"] = {}
    for name, knobs in named.items():
        try:
            ms = float(np.median(time_func(template.schedule(knobs), backend, repeat=5, min_repeat_ms=50)))
        except Exception as err:  # noqa: BLE001 - e.g. a launch past the shared memory the GPU lets it opt in to
            row["configs"][name] = {"knobs": knobs, "tflops": None, "error": f"{type(err).__name__}: {err}"[:300]}
            continue
        entry = {"knobs": knobs, "tflops": 2.0 * m * n * k / ms / 1e9}
        entry["max_rel_error"] = _whole_model_error(m, n, k, dtype, {group.key: knobs})
        if entry["max_rel_error"] > 1e-2:
            entry["error"] = "wrong result"
            entry["tflops"] = None
        row["configs"][name] = entry
    return row


def _whole_model_error(m, n, k, dtype, group_knobs) -> float:
    """The one-GEMM model built with `group_knobs`, against torch.matmul on seeded inputs."""
    import torch

    from xcomp.pipeline import compile_model

    module = compile_model(gemm_model(m, n, k, dtype), "cuda", progress=False, group_knobs=group_knobs)
    rng = np.random.default_rng(SEED)
    x, w = (rng.standard_normal(shape, dtype=np.float32).astype(dtype) for shape in ((m, k), (k, n)))
    reference = torch.matmul(torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()).float().cpu().numpy()
    return relative_error(module(x, w), reference)


def build_torch_model(name, dtype, device="cuda"):
    """(module on `device`, inputs_for(seed) -> tuple of tensors there, ONNX input names), seeded weights."""
    import torch

    torch.manual_seed(SEED)
    if name == "bert-base":
        import transformers

        config = transformers.BertConfig(return_dict=False, attn_implementation="eager")
        names = ["input_ids", "attention_mask"]
        model = _called_by_keyword(transformers.BertModel(config, add_pooling_layer=False), names)

        def inputs_for(seed):
            ids = torch.randint(0, config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(seed))
            return ids.to(device), torch.ones(1, 128, dtype=torch.int64, device=device)
    else:
        import torchvision

        model, names = getattr(torchvision.models, name)(weights=None), ["x"]

        def inputs_for(seed):
            image = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(seed))
            return (image.to(device, torch_dtype(dtype)),)
    return model.eval().to(device, torch_dtype(dtype)), inputs_for, names


def _called_by_keyword(model, names):
    """`model` with its inputs passed by name: transformers 5 wraps forward() in decorators that misbind the
    positional arguments torch.onnx traces with ("got multiple values for argument 'use_cache'")."""
    import torch

    class ByKeyword(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs)))

    return ByKeyword()


def export_model(name, dtype, path, device="cuda"):
    """Export the model to ONNX at `path` (opset 17, the legacy exporter); returns build_torch_model's triple."""
    import torch

    model, inputs_for, names = build_torch_model(name, dtype, device)
    with torch.no_grad():
        torch.onnx.export(model, inputs_for(SEED), path, opset_version=17, dynamo=False, input_names=names,
                          output_names=["y"])
    return model, inputs_for, names


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def prediction(module, measured_ms) -> dict:
    """What xcomp bench would predict for this module's target without a GPU (xcomp/report/predict.py), beside
    the inputs benchmarks/calibrate_gpu.py fits it with: kernel calls per run and the roofline bound."""
    from xcomp.report.predict import calibration, predict_groups

    calibrated = calibration(module.backend.target_string)
    rows = predict_groups(module.groups, module.backend.spec, calibrated)
    fields = {"kernel_calls": sum(r["count"] for r in rows),
              "roofline_ms": sum(r["roofline_predicted_ms"] * r["count"] for r in rows)}
    if calibrated:
        fields["predicted_ms"] = sum(r["predicted_total_ms"] for r in rows)
        fields["prediction_error"] = fields["predicted_ms"] / measured_ms - 1
    return fields


def run_model(name, dtype, out_dir, budget):
    import torch

    import xcomp
    from xcomp.report.profile import profile_module

    row = {"model": name, "dtype": dtype, "batch": 1}
    path = os.path.join(out_dir, f"{name}_{dtype}.onnx")
    model, inputs_for, names = export_model(name, dtype, path)
    args = inputs_for(SEED)
    tolerance = 1e-2 if dtype == "float16" else 1e-3
    for key, cuda_graph in (("xcomp_ms", False), ("xcomp_cuda_graph_ms", True)):
        t = time.monotonic()
        module = xcomp.compile(path, target="cuda", cuda_graph=cuda_graph)
        row[key.replace("_ms", "_compile_s")] = round(time.monotonic() - t, 1)
        errors = []
        for seed in (SEED, SEED + 1):  # a second input: a CUDA graph replays with each call's own data
            call_args = inputs_for(seed)
            with torch.no_grad():
                reference = _first(model(*call_args)).float().cpu().numpy()
            errors.append(relative_error(_first(module(*(a.cpu().numpy() for a in call_args))), reference))
        row[key.replace("_ms", "_max_rel_error")] = max(errors)
        if max(errors) > tolerance:
            row[key.replace("_ms", "_error")] = f"wrong result: max error {max(errors):.3g} of the largest output"
            continue
        row[key] = module.benchmark(dict(zip(names, (a.cpu().numpy() for a in args))), repeat=50)["median_ms"]
        if not cuda_graph:
            row.update(prediction(module, row[key]))
            if budget.left() > 120:  # per-group times: what a per-kind calibration of the prediction needs
                row["groups"] = [g.to_dict() for g in profile_module(module, repeat=5, progress=False)]
    os.remove(path)
    for key, mode in TORCH_MODES.items():
        if budget.left() < 60 and mode is not None:
            row[key] = None
            row.setdefault("skipped", []).append(key)
            continue
        with torch.no_grad():
            fn = model if mode is None else torch.compile(model, mode=mode)
            t = time.monotonic()
            fn(*args)
            torch.cuda.synchronize()
            if mode is not None:
                row[key.replace("_ms", "_compile_s")] = round(time.monotonic() - t, 1)
            row[key] = cuda_time_ms(lambda: fn(*args), warmup=5, repeat=50)
    return row


def environment(commit, dry_run):
    info = {"date": datetime.date.today().isoformat(), "commit": commit, "dry_run": dry_run}
    if dry_run:
        return {"device": "none (dry run, cuda:sm_90)", **info}
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, **info, "torch": torch.__version__, "cuda": torch.version.cuda,
            "sm": f"sm_{props.major}{props.minor}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for gpu_suite.json and the generated code")
    parser.add_argument("--budget-s", type=float, default=300, help="start no step after this many seconds")
    parser.add_argument("--commit", default="unknown", help="the commit measured (the device copy has no .git)")
    parser.add_argument("--dry-run", action="store_true", help="compile for cuda:sm_90 only; no GPU needed")
    parser.add_argument("--only", nargs="*", help="run only the steps whose label holds one of these words "
                        "(labels: 'gemm 4096x4096x4096 float16', 'sweep ...', 'model resnet50 float16')")
    parser.add_argument("--trials", type=int, default=24, help="random configs per knob sweep")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    budget = Budget(args.budget_s)
    result = {**environment(args.commit, args.dry_run), "gemm": [], "knob_sweeps": [], "models": [],
              "attention": []}
    out_json = os.path.join(args.out, "gpu_suite.json")

    def record(section, label, fn, *params):
        if args.only and not any(word in label for word in args.only):
            return
        if budget.left() <= 0:
            result[section].append({"step": label, "skipped": "out of budget"})
            return
        t = time.monotonic()
        try:
            row = fn(*params)
        except Exception as err:  # one failing step must not cost the others their GPU time
            traceback.print_exc()
            row = {"step": label, "error": f"{type(err).__name__}: {str(err)[:2000]}"}
        row["step_s"] = round(time.monotonic() - t, 1)
        result[section].append(row)
        print(json.dumps(row), flush=True)
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)

    for m, n, k, dtype, *math in GEMMS:
        record("gemm", " ".join([f"gemm {m}x{n}x{k} {dtype}", *math]), run_gemm, m, n, k, dtype, args.out,
               args.dry_run, *math)
    if not args.dry_run:  # the models before the sweeps: torch.compile is the baseline the targets name
        for name, dtype in MODELS:
            record("models", f"model {name} {dtype}", run_model, name, dtype, args.out, budget)
    for heads, seq, head_dim, causal in ATTENTIONS:
        record("attention", f"attention {heads}x{seq}x{head_dim}" + (" causal" if causal else ""), run_attention,
               heads, seq, head_dim, causal, args.dry_run)
    for m, n, k, dtype in SWEEPS:
        record("knob_sweeps", f"sweep {m}x{n}x{k} {dtype}", run_knob_sweep, m, n, k, dtype, args.trials,
               args.dry_run)
    with open(out_json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
