"""The Python API: xcomp.compile, xcomp.load."""

from __future__ import annotations


def compile(model, target: str = "cpu", input_shapes: dict | None = None, progress: bool = False):  # noqa: A001
    """Compile an ONNX model for `target` and return a runnable `xcomp.Module`.

    model:        path to an .onnx file, its bytes, or an onnx.ModelProto.
    target:       "cpu" (this host), "cpu:skylake-avx512", "cuda:sm_90", "rocm:gfx942", ...
    input_shapes: {input name: shape} binding the model's dynamic dims (e.g. {"x": (1, 3, 224, 224)}).
    progress:     show tqdm progress bars.
    """
    from xcomp.pipeline import compile_model

    return compile_model(model, target=target, input_shapes=input_shapes, progress=progress)


def load(path):
    """Load a module saved with `Module.save(path)`."""
    from xcomp.module import load as _load

    return _load(path)
