"""Model importers. Today: ONNX (frontends/onnx.py)."""

from .onnx import ImportedModel, TensorSpec, load_onnx, op_histogram

__all__ = ["ImportedModel", "TensorSpec", "load_onnx", "op_histogram"]
