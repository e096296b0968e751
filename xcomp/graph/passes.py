"""Small pieces our Relax passes share (fold_affine, const_fold, layout, transposed_matmul, attention)."""

from __future__ import annotations


def function_pass(transform, name: str):
    """A Relax pass running `transform(func) -> func` on every Relax function of a module."""
    from tvm import relax

    @relax.transform.function_pass(opt_level=0, name=name)
    def _pass(func, mod, ctx):  # noqa: ARG001
        return transform(func)

    return _pass


def bound_value(mutator, expr):
    """The value a variable is bound to, as a PyExprMutator has seen it (the importer binds parameters to
    variables), or `expr` itself."""
    from tvm import relax

    value = mutator.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    return expr if value is None else value


def is_op(expr, name: str) -> bool:
    """`expr` is a call of the Relax op `name` (e.g. "relax.matmul")."""
    import tvm
    from tvm import relax

    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def static_shape(ty):
    """A Relax type's shape as ints when it has one of rank 1 or more and every dim is static, else None."""
    dims = list(getattr(ty, "shape", None) or [])
    return [int(d) for d in dims] if dims and all(hasattr(d, "value") for d in dims) else None
