"""`xcomp bench`: xcomp against baselines on the same inputs, interleaved in one process."""

from __future__ import annotations

import time

import numpy as np

from xcomp.errors import UserError
from xcomp.module import latency_stats

BASELINES = ("onnxruntime",)


def interleaved_samples(runners: dict, repeat: int, warmup: int, progress: bool) -> dict:
    """{key: [ms, ...]}: every runner called once per round, in turn, so machine noise hits them all alike."""
    from xcomp.progress import bar

    for _ in range(warmup):
        for run in runners.values():
            run()
    samples = {key: [] for key in runners}
    for _ in bar(range(repeat), desc="bench", unit="round", enabled=progress, leave=False):
        for key, run in runners.items():
            t = time.perf_counter()
            run()
            samples[key].append((time.perf_counter() - t) * 1e3)
    return samples


class OnnxRuntimeBaseline:
    name = "onnxruntime"

    def __init__(self, model_path_or_bytes):
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("baseline onnxruntime is not installed (pip install onnxruntime)") from None
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        # ORT's pool threads spin for a while after each run; interleaved with xcomp they would steal the cores
        # xcomp's next run needs (squeezenet: xcomp 4.9 ms alone, 29.4 ms interleaved with spinning on, 4.9 with
        # it off; onnxruntime itself 2.5 vs 2.7 ms, within noise).
        self.settings = {"providers": ["CPUExecutionProvider"], "intra_op_allow_spinning": False}
        opts.add_session_config_entry("session.intra_op.allow_spinning",
                                      str(int(self.settings["intra_op_allow_spinning"])))
        self.session = ort.InferenceSession(model_path_or_bytes, opts, providers=self.settings["providers"])
        self.version = ort.__version__

    def __call__(self, inputs: dict):
        return self.session.run(None, inputs)


def _serialized(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    return model


def bench_model(model, target="cpu", baselines=("onnxruntime",), input_shapes=None, warmup=3, repeat=30,
                seed=0, progress=True) -> dict:
    """Compile, then time xcomp and each baseline alternately on the same random inputs."""
    import xcomp

    for name in baselines:
        if name not in BASELINES:
            raise UserError(f"unknown baseline {name!r}; available: {', '.join(BASELINES)}")
    t0 = time.perf_counter()
    module = xcomp.compile(model, target=target, input_shapes=input_shapes, progress=progress)
    compile_s = time.perf_counter() - t0
    inputs = module.random_inputs(seed)
    runners = {"xcomp": lambda: module.run(inputs)}
    results = {"xcomp": {"compile_s": compile_s}}
    for name in baselines:
        baseline = OnnxRuntimeBaseline(_serialized(model))
        runners[name] = lambda b=baseline: b(inputs)
        results[name] = {"version": baseline.version, "settings": baseline.settings}

    outputs = {name: run() for name, run in runners.items()}
    for name in baselines:  # same inputs, so the answers must agree
        ours = [outputs["xcomp"][s.name] for s in module.outputs]
        results[name]["max_abs_diff"] = float(max(np.max(np.abs(a - np.asarray(b))) for a, b in
                                                  zip(ours, outputs[name])))
    samples = interleaved_samples(runners, repeat, warmup, progress)
    for name in runners:
        results[name].update(latency_stats(samples[name]))
    for name in baselines:
        results[name]["xcomp_ratio"] = results["xcomp"]["median_ms"] / results[name]["median_ms"]
    return {
        "model": module.info.get("model_name", ""),
        "target": module.target,
        "hardware": module.spec.name,
        "inputs": [s.to_dict() for s in module.inputs],
        "warmup": warmup,
        "repeat": repeat,
        "seed": seed,
        "results": results,
    }
