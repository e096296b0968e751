"""What the converters share: the context a node is converted in, and small Relax helpers."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class NodeContext:
    """What our converters know about the node they convert, beyond TVM's calling convention (absent inside an
    If branch: the importer computes every branch, so a run-time check there could fire for the branch not
    taken).

    `runtime_check(condition, format_args, message)`: the module raises InputError with `message` (a str.format
    template filled with the values of `format_args`, Relax expressions) when `condition`, a bool scalar Relax
    expression, is false at run time. The check runs after the whole graph (an assert cannot sit among the
    graph's pure ops), so a converter must still keep every bad value memory-safe."""

    node: object  # onnx.NodeProto
    label: str  # how messages name the node: its name, else its first output's
    runtime_check: object  # callable, see above
    indices_checked_on_host: bool = False  # Gather: its indices are a graph input Module checks before running


def relax_api():
    from tvm import relax

    return relax


def dtype_of(expr) -> str:
    dtype = expr.ty.dtype
    return str(getattr(dtype, "dtype", dtype))


def string_attr(attrs, name, default) -> str:
    """A string attribute as str (TVM's importer hands them over as bytes)."""
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def static_dim(expr, axis, what, why="the recurrence is unrolled over it"):
    import tvm

    dim = expr.ty.shape.values[axis] if expr.ty.shape is not None else None
    if not isinstance(dim, tvm.tirx.IntImm):
        raise ValueError(f"{what} is {dim if dim is not None else 'unknown'}, not a static number: {why}, so bind "
                         "it with input_shapes / --input-shape")
    return int(dim)


def dim_text(dim) -> str:
    """A dim as messages show it: 32, or the symbolic expression (batch * 4)."""
    import tvm

    return str(int(dim)) if isinstance(dim, tvm.tirx.IntImm) else str(dim)


def const_value(expr):
    """numpy value of a constant input, else None."""
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    return None


def take_index(bb, expr, index, axis=0):
    """expr[index] along axis (drops the axis), folded when expr is a constant."""
    relax = relax_api()
    value = const_value(expr)
    if value is not None:
        return relax.const(np.ascontiguousarray(np.take(value, index, axis=axis)))
    return bb.emit(relax.op.take(expr, relax.const(index, "int64"), axis=axis, mode="clip"))


def transpose2d(bb, expr):
    relax = relax_api()
    value = const_value(expr)
    if value is not None:
        return relax.const(np.ascontiguousarray(value.T))
    return bb.emit(relax.op.permute_dims(expr, [1, 0]))


def slice_axis(bb, expr, begin, end, axis=-1):
    relax = relax_api()
    value = const_value(expr)
    if value is not None:
        index = [slice(None)] * value.ndim
        index[axis] = slice(begin, end)
        return relax.const(np.ascontiguousarray(value[tuple(index)]))
    return bb.emit(relax.op.strided_slice(expr, axes=[axis], begin=[begin], end=[end]))
