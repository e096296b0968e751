"""Gather, made memory-safe and checked."""

from __future__ import annotations

import numpy as np

from .common import const_value, dtype_of, relax_api


def convert_gather(bb, inputs, attrs, opset, stock):
    """TVM's Gather, made memory-safe for runtime indices: its `take` runs in "fast" mode, which reads (and
    segfaults) out of bounds for an index past the axis, e.g. a token id >= the vocabulary in an embedding
    lookup. ONNX makes such an index an error. Ours takes in "nan" mode (NaN rows for float data) / "clip" mode
    (other dtypes), so no index ever reads outside the data; a bad constant index fails the import, and for
    indices computed in the graph the module raises at run time after the take (see _check_indices). In-range
    indices, negative ones included (TVM wraps them first), give exactly the stock result."""
    relax = relax_api()
    out = stock()
    if isinstance(out, relax.Call) and getattr(out.op, "name", "") == "relax.take" and out.attrs.mode == "fast":
        data = out.args[0]
        axis = int(out.attrs.axis) if out.attrs.axis is not None else 0
        if data.ty.shape is not None:
            axis %= max(len(data.ty.shape.values), 1)
            _check_indices(bb, inputs[1], data, axis, attrs)
        mode = "nan" if dtype_of(data).startswith(("float", "bfloat")) else "clip"
        out = relax.op.take(data, out.args[1], axis=out.attrs.axis, mode=mode)
    return out


def _check_indices(bb, indices, data, axis, attrs):
    """Make sure every one of a Gather's `indices` lies in [-n, n - 1], n = data.shape[axis]. Constant indices
    over a static axis are checked here (a bad one fails the import); other indices get a run-time check (the
    module raises InputError naming the node), unless they are a graph input the module already checks before
    running (TensorSpec.check_indices: cheaper, and it names the position) or the node sits in an If branch.
    Constant indices over a symbolic axis stay unchecked (NaN / clamped rows), as do uint / shape indices."""
    import tvm

    relax = relax_api()
    size = data.ty.shape.values[axis]
    value = const_value(indices)
    if value is not None:
        if isinstance(size, tvm.tirx.IntImm) and value.size:
            n = int(size)
            bad = value[(value < -n) | (value >= n)]
            if bad.size:
                raise ValueError(f"constant index {bad.flat[0]} is out of range for axis {axis} of size {n}: "
                                 f"indices must lie in [{-n}, {n - 1}]")
        return
    context = attrs.get("tvm_custom", {}).get("xcomp")
    if context is None or context.indices_checked_on_host or not isinstance(indices.ty, relax.TensorType):
        return
    dtype = dtype_of(indices)
    if dtype not in ("int32", "int64"):  # the only index types ONNX allows
        return
    label = context.label.replace("{", "{{").replace("}", "}}")  # the message is a str.format template
    low, high = relax.op.min(indices), relax.op.max(indices)  # an empty `indices` passes: min > max
    if isinstance(size, tvm.tirx.IntImm):
        n = int(size)
        if n > np.iinfo(dtype).max:  # every value of the dtype is in range
            return
        limit, negated, format_args = relax.const(n, dtype), relax.const(-n, dtype), [low, high]
        message = (f"Gather node {label!r}: index out of range for axis {axis} of size {n}: indices must lie in "
                   f"[{-n}, {n - 1}], got values from {{}} to {{}}")
    else:  # symbolic: the size as the module runs
        shape = bb.normalize(relax.op.shape_to_tensor(relax.op.shape_of(data)))
        limit = relax.op.take(shape, relax.const(axis, "int64"), axis=0)
        limit = bb.normalize(limit if dtype == "int64" else relax.op.astype(limit, dtype))
        negated, format_args = relax.op.negative(limit), [limit, low, high]
        message = (f"Gather node {label!r}: index out of range for axis {axis} of size {{}}: indices must lie in "
                   "[-size, size - 1], got values from {} to {}")
    in_range = relax.op.logical_and(relax.op.greater_equal(low, negated), relax.op.less(high, limit))
    context.runtime_check(in_range, format_args, message)
