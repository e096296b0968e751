"""Models that ship inside the onnx package (no download): `onnx:light_resnet50`, `onnx:test_AvgPool2d`, ..."""

from __future__ import annotations

import os

from xcomp.errors import ModelLoadError

PREFIX = "onnx:"
_SETS = ("light", "pytorch-converted", "pytorch-operator", "simple", "real")


def data_root() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def shipped_models() -> dict:
    """{name: path to model.onnx} for every model in the onnx package's test data."""
    root = data_root()
    found = {}
    for set_name in _SETS:
        folder = os.path.join(root, set_name)
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if entry.endswith(".onnx"):
                found[entry[: -len(".onnx")]] = path
            elif os.path.isfile(os.path.join(path, "model.onnx")):
                found[entry] = os.path.join(path, "model.onnx")
    return found


def resolve(model: str) -> str:
    """`onnx:NAME` -> the path of that shipped model; anything else is returned unchanged."""
    if not isinstance(model, str) or not model.startswith(PREFIX):
        return model
    name = model[len(PREFIX):]
    models = shipped_models()
    if name not in models:
        light = sorted(n for n in models if n.startswith("light_"))
        raise ModelLoadError(f"{model}: no model {name!r} ships with onnx; try one of {', '.join(light)}")
    return models[name]


def read_test_data(folder: str, prefix: str) -> list:
    """The arrays of `prefix`_0.pb, `prefix`_1.pb, ... (prefix "input" or "output") in a shipped test_data_set
    folder, in index order."""
    import glob

    import onnx
    from onnx import numpy_helper

    files = sorted(glob.glob(os.path.join(folder, f"{prefix}_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    arrays = []
    for path in files:
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(tensor))
    return arrays
