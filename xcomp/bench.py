"""Interleaved timing on the same inputs, and the onnxruntime baseline: what `xcomp bench` (xcomp/report) and
the benchmarks/ scripts time with."""

from __future__ import annotations

import time
import warnings

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


# baseline name -> (onnxruntime execution provider, device it runs on)
ONNXRUNTIME_BASELINES = {
    "onnxruntime": ("CPUExecutionProvider", "cpu"),
    "onnxruntime-cuda": ("CUDAExecutionProvider", "cuda"),
    "onnxruntime-rocm": ("ROCMExecutionProvider", "rocm"),
}
_GPU_PACKAGE = {"CUDAExecutionProvider": "onnxruntime-gpu", "ROCMExecutionProvider": "onnxruntime-rocm"}


class ProviderUnavailable(Exception):
    """The onnxruntime installed here cannot run that execution provider; the message says why."""


class OnnxRuntimeBaseline:
    """onnxruntime on one execution provider (ONNXRUNTIME_BASELINES). Nodes the provider lacks run on its CPU
    provider, as onnxruntime places them for its users; a GPU provider that fails to load is refused rather than
    timed on the CPU under its name."""

    def __init__(self, model_path_or_bytes, name: str = "onnxruntime"):
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("baseline onnxruntime is not installed (pip install onnxruntime)") from None
        self.name = name
        provider, self.device = ONNXRUNTIME_BASELINES[name]
        self.version = ort.__version__
        available = ort.get_available_providers()
        if provider not in available:
            raise ProviderUnavailable(
                f"onnxruntime {ort.__version__} here has no {provider} (it has {', '.join(available)}); "
                f"{_GPU_PACKAGE.get(provider, 'another onnxruntime build')} has it, on a machine with that GPU")
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        # ORT's pool threads spin for a while after each run; interleaved with xcomp they would steal the cores
        # xcomp's next run needs (squeezenet: xcomp 4.9 ms alone, 29.4 ms interleaved with spinning on, 4.9 with
        # it off; onnxruntime itself 2.5 vs 2.7 ms, within noise).
        self.settings = {"providers": [provider], "intra_op_allow_spinning": False}
        opts.add_session_config_entry("session.intra_op.allow_spinning",
                                      str(int(self.settings["intra_op_allow_spinning"])))
        with warnings.catch_warnings():  # the fallback below warns on stderr too: the report says it once
            warnings.simplefilter("ignore")
            self.session = ort.InferenceSession(model_path_or_bytes, opts, providers=self.settings["providers"])
        if self.session.get_providers()[0] != provider:  # onnxruntime falls back to the CPU when a GPU's fails
            raise ProviderUnavailable(f"onnxruntime's {provider} did not load here (the session runs on "
                                      f"{self.session.get_providers()}): the GPU or its libraries are missing")

    def __call__(self, inputs: dict):
        return self.session.run(None, inputs)


def _serialized(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    return model
