"""Interleaved timing on the same inputs, and the onnxruntime baseline: what `xcomp bench` (xcomp/report) and
the benchmarks/ scripts time with."""

from __future__ import annotations

import time

from xcomp.errors import UserError


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
