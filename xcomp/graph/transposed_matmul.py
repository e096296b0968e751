"""Read a transposed matmul operand as it is: `matmul(a, permute_dims(b))`, the last two axes of b swapped
(attention's q k^T), becomes one einsum over b.

Fusion never puts an injective producer into a matmul's group, so the transpose ran as a group of its own: a copy
of the whole K cache on every decode step, which the matmul then copied again into its packed layout. As one
einsum the matmul template sees B's "nt" layout and reads K once: packed for many query rows, in dot products
along K's rows for a few (schedules/cpu/matmul.py).
"""

from __future__ import annotations

_LETTERS = "abcdefgh"


def _swaps_last_two(call) -> bool:
    axes = call.attrs.axes
    if axes is None:  # a full reversal: the same as a swap on 2-D only
        return call.ty.ndim == 2
    axes = [int(x) for x in axes]
    n = len(axes)
    return n >= 2 and axes == [*range(n - 2), n - 1, n - 2]


def _einsum_of(a, b):
    """einsum(a, b) reading b as [..., N, K], or None when the batch axes differ (a broadcast) or the shapes are
    unknown."""
    from tvm import relax
    from tvm.sym import Analyzer

    a_shape, b_shape = (getattr(x.ty, "shape", None) for x in (a, b))
    if a_shape is None or b_shape is None or len(a_shape) != len(b_shape) or len(a_shape) - 2 > len(_LETTERS):
        return None
    analyzer = Analyzer()
    if not all(analyzer.can_prove_equal(x, y) for x, y in zip(list(a_shape)[:-2], list(b_shape)[:-2])):
        return None
    batch = _LETTERS[:len(a_shape) - 2]
    return relax.op.einsum([a, b], f"{batch}mz,{batch}nz->{batch}mn")


def read_transposed_operands(func):
    """`func` with every matmul whose right operand is a runtime tensor's last-two-axes transpose rewritten as
    an einsum over that tensor; the transpose is left dead for DeadCodeElimination where nothing else reads it."""
    import tvm
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from xcomp.graph.passes import bound_value, is_op

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            if not is_op(call, "relax.matmul") or str(call.ty.dtype) != "float32":
                return call
            transpose = bound_value(self, call.args[1])
            if not is_op(transpose, "relax.permute_dims") or not _swaps_last_two(transpose):
                return call
            source = transpose.args[0]
            if isinstance(bound_value(self, source), tvm.ir.expr.Constant):  # a weight: folded, packed instead
                return call
            einsum = _einsum_of(call.args[0], source)
            return call if einsum is None else einsum

    return _Rewriter().visit_expr(func)


def ReadTransposedOperands():  # noqa: N802 (named like the TVM passes it sits among)
    """The Relax function pass running read_transposed_operands on every function."""
    from xcomp.graph.passes import function_pass

    return function_pass(read_transposed_operands, "xcomp.ReadTransposedOperands")
