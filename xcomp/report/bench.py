"""Timing runners side by side on the same inputs, and the onnxruntime baseline: what `xcomp bench` (xcomp/report)
and the benchmarks/ scripts time with."""

from __future__ import annotations

import time
import warnings

from xcomp.errors import UserError
from xcomp.timing import time_calls

# Calls per block: the first follows another runner, the rest are the steady state a serving loop sees.
BLOCK = 6
# Pause before each block, so that the last runner's pool threads, which spin for a while after its calls, are idle
# again instead of taking a core from the next runner (docs/decisions/bench-timing.md).
SETTLE_S = 0.1


def alternating_blocks(runners: dict, repeat: int, warmup: int, block: int = BLOCK, progress: bool = False):
    """Time every runner `repeat` times in steady state, the runners taking turns: each round, each runs a block
    of back-to-back calls after a pause (SETTLE_S), so slow moments of a shared machine hit them all alike. The
    first call of a block runs after another runner's block, which took the caches (and, without the pause, its
    spinning threads would take a core): it is timed apart. `warmup` untimed calls of each runner come first.
    Returns (steady, after_switch), each {key: [ms, ...]}; with one runner there is no switch and every call is
    steady."""
    from xcomp.progress import bar

    if block < 2:
        raise UserError(f"a block of {block} call(s) has no steady call after its first: use 2 or more")
    for run in runners.values():
        for _ in range(warmup):
            run()
    alone = len(runners) == 1
    per_block = block if alone else block - 1
    steady = {key: [] for key in runners}
    after_switch = {key: [] for key in runners}
    rounds = -(-repeat // per_block)
    for index in bar(range(rounds), desc="bench", unit="round", enabled=progress, leave=False):
        calls = min(per_block, repeat - index * per_block)
        for key, run in runners.items():
            if not alone:
                time.sleep(SETTLE_S)
                after_switch[key].append(_timed_ms(run))
            steady[key].extend(_timed_ms(run) for _ in range(calls))
    return steady, after_switch


def _timed_ms(run) -> float:
    return time_calls(run, repeat=1)[0]


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
        # onnxruntime as its users run it: its default settings, whose pool threads spin for a while after each
        # run (alternating_blocks pauses after every block for them; docs/decisions/bench-timing.md).
        self.settings = {"providers": [provider], "intra_op_allow_spinning": True}
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
