"""Constant folding in numpy for the ops that dominate imported CNNs: batch-norm arithmetic, reshapes and
broadcasts of parameters, and the layout transforms of conv weights.

TVM's FoldConstant builds every foldable call with LLVM and runs it, a large share of a CNN's compile time; here
the same calls cost microseconds (docs/decisions/one-time-costs.md). FoldConstant still runs after this pass for
whatever it leaves (ops not in `_ELEMENTWISE`/`_SHAPE_OPS`, dtypes numpy and TVM might disagree on).
"""

from __future__ import annotations

import numpy as np

from xcomp.graph.passes import static_shape

_ELEMENTWISE = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.divide": np.divide,
    "relax.power": np.power,
    "relax.sqrt": np.sqrt,
    "relax.rsqrt": lambda x: 1 / np.sqrt(x),
    "relax.negative": np.negative,
}
_SHAPE_OPS = ("relax.reshape", "relax.broadcast_to", "relax.expand_dims", "relax.permute_dims", "relax.squeeze",
              "relax.layout_transform")


def _index_values(expr, env):
    """A TIR index expression (vars, constants, + - * // %) evaluated over numpy index arrays."""
    from tvm import tirx

    if isinstance(expr, tirx.IntImm):
        return expr.value
    if expr in env:
        return env[expr]
    ops = {tirx.Add: np.add, tirx.Sub: np.subtract, tirx.Mul: np.multiply, tirx.FloorDiv: np.floor_divide,
           tirx.FloorMod: np.mod}
    op = ops.get(type(expr))
    if op is None:
        raise NotImplementedError(type(expr).__name__)
    return op(_index_values(expr.a, env), _index_values(expr.b, env))


def layout_transform(value: np.ndarray, index_map, out_shape) -> np.ndarray:
    """relax.layout_transform without padding: every input element moved to its mapped index."""
    coords = np.indices(value.shape, sparse=True)
    env = dict(zip(index_map.initial_indices, coords))
    target = [np.broadcast_to(_index_values(e, env), value.shape) for e in index_map.final_indices]
    out = np.empty(out_shape, value.dtype)
    out[tuple(target)] = value
    return out


def _evaluate(call, values):
    """numpy result of `call` on constant `values`, or None when this folder does not handle it."""
    name = call.op.name
    if name in _ELEMENTWISE:
        if any(v.dtype != np.float32 for v in values):  # integer division and overflow rules differ
            return None
        return np.asarray(_ELEMENTWISE[name](*values), np.float32)
    if name not in _SHAPE_OPS:
        return None
    out_shape = static_shape(call.ty)
    if out_shape is None:
        return None
    value = values[0]
    if name == "relax.layout_transform":
        if call.attrs.pad_value is not None or np.prod(out_shape) != value.size:
            return None
        return layout_transform(value, call.attrs.index_map, out_shape)
    if name == "relax.broadcast_to":
        return np.ascontiguousarray(np.broadcast_to(value, out_shape))
    if name == "relax.permute_dims":
        axes = call.attrs.axes
        return np.ascontiguousarray(np.transpose(value, None if axes is None else [int(a) for a in axes]))
    return value.reshape(out_shape)  # reshape, expand_dims, squeeze: same elements, same order


def fold_constants(func):
    """`func` with each supported call on constants replaced by its value."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from xcomp.graph.passes import bound_value

    @mutator
    class _Folder(PyExprMutator):
        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op) or call.op.name not in (*_ELEMENTWISE, *_SHAPE_OPS):
                return call
            tensors = [bound_value(self, a) for a in call.args if not isinstance(a, relax.ShapeExpr)]
            if not tensors or not all(isinstance(a, tvm.ir.expr.Constant) for a in tensors):
                return call
            try:
                result = _evaluate(call, [a.value.numpy() for a in tensors])
            except NotImplementedError:  # an index map beyond + - * // %
                return call
            return call if result is None else relax.const(result)

    return _Folder().visit_expr(func)


def FoldConstantsNumpy():  # noqa: N802 (named like the TVM passes it sits among)
    from xcomp.graph.passes import function_pass

    return function_pass(fold_constants, "xcomp.FoldConstantsNumpy")
