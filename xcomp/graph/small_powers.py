"""Rewrite a float power by a constant 2, 3 or 4 as multiplications.

GPT-2's tanh GELU cubes its input. TVM lowers every power to a scalar pow() call, which LLVM cannot vectorize,
and warns about each one it builds. Relax's FoldConstant builds TVM's lowering of every call to see whether it
folds, so the rewrite runs ahead of the first one: the products serve every target and every op that emits a
power, and TVM never builds pow for them.
"""

from __future__ import annotations

SMALL_EXPONENTS = (2.0, 3.0, 4.0)


def multiply_out_small_powers(func):
    """`func` with every `power(x, c)` whose x is a float tensor and whose c is a one-element constant in
    SMALL_EXPONENTS (no broadcast to a larger shape) replaced by c - 1 multiplications (x^4 as a squared square)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from xcomp.graph.passes import bound_value

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.power":
                return call
            base, exponent = call.args
            n = _small_exponent(bound_value(self, exponent), base)
            if n is None:
                return call
            square = relax.op.multiply(base, base)
            return {2: square, 3: relax.op.multiply(square, base), 4: relax.op.multiply(square, square)}[n]

    return _Rewriter().visit_expr(func)


def _small_exponent(exponent, base) -> int | None:
    """The exponent as an int where the rewrite applies to base ** exponent, else None."""
    import tvm
    from tvm import relax

    base_type = base.ty
    if (not isinstance(exponent, tvm.ir.expr.Constant) or not isinstance(base_type, relax.TensorType)
            or not str(base_type.dtype).startswith(("float", "bfloat"))):
        return None
    value = exponent.value.numpy()
    if value.size != 1 or value.ndim > base_type.ndim or float(value.reshape(())) not in SMALL_EXPONENTS:
        return None
    return int(value.reshape(()))


def MultiplyOutSmallPowers():  # noqa: N802 (named like the TVM passes it sits among)
    """The Relax function pass running multiply_out_small_powers on every function."""
    from xcomp.graph.passes import function_pass

    return function_pass(multiply_out_small_powers, "xcomp.MultiplyOutSmallPowers")
