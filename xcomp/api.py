"""The Python API: xcomp.compile, xcomp.load."""

from __future__ import annotations


def compile(model, target: str = "cpu", input_shapes: dict | None = None, tune_db=None,  # noqa: A001
            progress: bool = False, input_values: dict | None = None, cuda_graph: bool = False,
            costmodel=True, tf32: bool = False):
    """Compile an ONNX model for `target` and return a runnable `xcomp.Module`.

    model:        path to an .onnx file, its bytes, an onnx.ModelProto, or `onnx:NAME` for a model shipped
                  with the onnx package (e.g. "onnx:light_resnet50").
    target:       "cpu" (this host), "cpu:skylake-avx512", "cuda:sm_90", "rocm:gfx942", ...
    input_shapes: {input name: shape} specializing the model's symbolic dims (e.g. {"x": (1, 3, 224, 224)}):
                  static shapes, tiled templates, tunable. Without it symbolic dims stay symbolic and the module
                  serves every size of them.
    tune_db:      a tuning database (from `xcomp tune`): each group uses its fastest measured config.
    costmodel:    groups without tuning records use the shipped cost model's predicted best config where its
                  held-out evidence trusts the group's template on this hardware, the template default
                  elsewhere (module.info["schedules"] says "costmodel" or "default" per group). False: every such
                  group uses its template default. A path: that model file, with its .confidence.json beside
                  it (python -m xcomp.autotune.pretrain writes both).
    progress:     show tqdm progress bars.
    input_values: {input name: array} fixing inputs that set shapes (a ReduceSum's axes, a Resize's scales) to
                  constants: TVM needs those at compile time, and compile says which inputs when it does.
                  The module then checks, when given them, that they hold these values.
    cuda_graph:   (CUDA) replay the kernels as CUDA graphs: one launch per graph instead of one per kernel,
                  for static shapes; the graph is captured on the first call.
    tf32:         (NVIDIA) float32 matmuls and convs run on TF32 matrix cores: operands rounded to tf32 (10
                  mantissa bits), sums in float32, as torch.backends.cuda.matmul.allow_tf32; off (the default)
                  they keep float32 math. module.info["float32_math"] says which ("fp32" or "tf32"); on a target
                  without TF32 matrix cores xcomp can program (CPUs, ROCm) it changes nothing and a note says so.
    """
    from xcomp.frontends.examples import resolve
    from xcomp.native import tvm_log_to_logging
    from xcomp.pipeline import compile_model

    with tvm_log_to_logging():
        return compile_model(resolve(model), target=target, input_shapes=input_shapes, tune_db=tune_db,
                             progress=progress, input_values=input_values, cuda_graph=cuda_graph,
                             costmodel=costmodel, tf32=tf32)


def tune(model, target: str = "cpu", db="tune.sqlite", trials: int | None = None, time_budget_s: float | None = None,
         input_shapes: dict | None = None, seed: int = 0, progress: bool = False, runner=None,
         input_values: dict | None = None, in_model_top: int = 4) -> dict:
    """Tune every unique operator group of `model`, storing all measurements in `db`; returns a summary
    (per group: default and best latency, speedup, trials) and the search history. `runner`: where candidates
    are measured (default: this machine); xcomp.autotune.bundle.BundleRunner or rpc.RPCRunner measure elsewhere.
    `input_shapes` / `input_values`: as for compile (compile with the same ones to use the records).
    `in_model_top`: measuring here, each group's default and that many - 1 fastest other configs are then timed
    inside the model, and compile --db uses a tuned config only where it beat the default there in every round
    (the summary's "in_model", with an "error" where that step failed; the search's records stay either way; 0:
    not done, and a tuned config may then lose to the default inside the model)."""
    from xcomp.autotune.tuner import tune_model
    from xcomp.frontends.examples import resolve

    return tune_model(resolve(model), target=target, db_path=db, trials=trials, time_budget_s=time_budget_s,
                      input_shapes=input_shapes, input_values=input_values, seed=seed, progress=progress,
                      runner=runner, in_model_top=in_model_top)


def load(path):
    """Load a module saved with `Module.save(path)`."""
    from xcomp.runtime.module import load as _load

    return _load(path)
