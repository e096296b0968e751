"""PyTorch baselines for `xcomp bench`: the model as its authors run it, in eager mode and through torch.compile.

The torch program comes from `--torch-model FILE.pt2`, an ExportedProgram written by torch.export.save (graph and
weights in one file, no Python class needed to load it); without one, the ONNX model is converted with onnx2torch
when that is installed. It gets the ONNX model's inputs positionally, as CPU tensors, and its outputs must have the
ONNX outputs' shapes: a program that does not fit is a user error naming the file, not a baseline that pretends.
"""

from __future__ import annotations

import hashlib
import os
import time

from xcomp.errors import UserError

NAMES = ("torch", "torch.compile")


class Unavailable(Exception):
    """A torch baseline cannot run here; `entry(name)` says why (it goes into the report as is)."""

    def __init__(self, status: str, reason: str, **extra):
        super().__init__(reason)
        self.status, self.reason, self.extra = status, reason, extra

    def entry(self, name: str) -> dict:
        return {"name": name, "status": self.status, "reason": self.reason, **self.extra}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_program(onnx_model, torch_model: str | None):
    """(torch.nn.Module in eval mode, a description of where it came from)."""
    try:
        import torch
    except ImportError:
        raise Unavailable("not installed", "import torch failed (pip install torch)") from None
    if torch_model:
        if not os.path.isfile(torch_model):
            raise UserError(f"--torch-model {torch_model}: no such file")
        try:
            program = torch.export.load(torch_model)
        except Exception as err:  # torch raises whatever its zip / pickle readers raise
            raise UserError(f"--torch-model {torch_model}: not a program saved by torch.export.save "
                            f"({type(err).__name__}: {err})") from None
        return program.module(), {"kind": "torch.export", "path": torch_model, "sha256": _sha256(torch_model)}
    try:
        import onnx2torch
    except ImportError:
        raise Unavailable("unavailable", "no torch program: give --torch-model FILE.pt2 (written by "
                          "torch.export.save), or pip install onnx2torch to convert the ONNX model",
                          version=torch.__version__) from None
    import onnx

    proto = (onnx_model if isinstance(onnx_model, onnx.ModelProto) else onnx.load(onnx_model)
             if isinstance(onnx_model, str) else onnx.load_model_from_string(onnx_model))
    try:
        program = onnx2torch.convert(proto).eval()
    except Exception as err:  # an op onnx2torch lacks, most often
        raise Unavailable("failed", f"onnx2torch cannot convert the model: {_first_line(err)}",
                          version=torch.__version__) from None
    return program, {"kind": "onnx2torch", "version": getattr(onnx2torch, "__version__", "unknown")}


class TorchBaseline:
    """One torch program on the CPU, eager (`torch`) or compiled by torch.compile's default backend, inductor
    (`torch.compile`: it compiles on the first call, which `first_run_s` includes)."""

    def __init__(self, name: str, program, source: dict):
        import torch

        self.name, self.torch, self.source = name, torch, source
        self.net = torch.compile(program) if name == "torch.compile" else program
        self.version = torch.__version__

    def __call__(self, inputs: dict):
        with self.torch.inference_mode():
            out = self.net(*[self.torch.from_numpy(v) for v in inputs.values()])
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [o.detach().numpy() for o in outs]

    def entry(self) -> dict:
        return {"name": self.name, "device": "cpu", "status": "measured", "version": self.version,
                "mode": "torch.compile (inductor)" if self.name == "torch.compile" else "eager",
                "threads": self.torch.get_num_threads(), "source": self.source}


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def start(names, onnx_model, torch_model: str | None, inputs: dict, expected_shapes: list) -> dict:
    """{name: (TorchBaseline, its outputs on `inputs`, seconds to the first result) or Unavailable} for each torch
    baseline in `names`; UserError for a --torch-model that does not fit. The program is loaded once and run eager
    first, for both: its outputs must have `expected_shapes` (the ONNX model's), and a program that does not fit
    is told apart from a torch.compile that fails here."""
    t0 = time.perf_counter()
    try:
        program, source = load_program(onnx_model, torch_model)
        eager = TorchBaseline("torch", program, source)
        outputs = _first_outputs(eager, torch_model, inputs, expected_shapes)
    except Unavailable as why:
        return {name: why for name in names}
    started = {"torch": (eager, outputs, time.perf_counter() - t0)} if "torch" in names else {}
    if "torch.compile" in names:
        t0 = time.perf_counter()
        compiled = TorchBaseline("torch.compile", program, source)
        try:
            started["torch.compile"] = (compiled, compiled(inputs), time.perf_counter() - t0)
        except Exception as err:
            started["torch.compile"] = Unavailable("failed", f"torch.compile failed: {_first_line(err)}",
                                                   version=compiled.version)
    return started


def _first_outputs(eager, torch_model, inputs, expected_shapes) -> list:
    """The eager program's outputs on `inputs`, checked against the ONNX model's shapes: a --torch-model that
    does not fit is the user's error, an onnx2torch conversion that does not is the converter's."""
    def misfit(message):
        if torch_model:
            return UserError(f"--torch-model {torch_model}: {message}")
        return Unavailable("failed", f"the onnx2torch conversion: {message}", version=eager.version)

    try:
        outputs = eager(inputs)
    except Exception as err:
        shapes = {k: list(v.shape) for k, v in inputs.items()}
        raise misfit(f"calling it on the ONNX model's inputs {shapes} failed: {_first_line(err)}") from None
    got, want = [list(o.shape) for o in outputs], [list(s) for s in expected_shapes]
    if got != want:
        raise misfit(f"returns outputs of shapes {got}, the ONNX model {want}: not the same model")
    return outputs
