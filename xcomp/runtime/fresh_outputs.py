"""Which outputs of a compiled main each call allocates afresh: the ones a module call may hand to its caller
without a copy (docs/decisions/call-overhead.md). The others are a model constant, an input, or a view of one."""

from __future__ import annotations


def fresh_outputs_recorder(found: list):
    """A pass for right after StaticPlanBlockMemory that changes nothing and appends to `found` one bool per
    output of main: True where the output's memory is a tensor of its own that this call allocated.

    At that point an output the memory planner leaves to the call is `R.builtin.alloc_tensor`, possibly reached
    through plain bindings, match_casts and reshapes (a view of the same memory); anything else (a constant, a
    parameter, the result of a packed function) counts as not fresh."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="xcomp.RecordFreshOutputs")
    def _pass(mod, ctx):  # noqa: ARG001
        found.extend(fresh_outputs(mod["main"]))
        return mod

    return _pass


def fresh_outputs(main) -> list:
    """One bool per output of the Relax function `main` (a tuple's fields, or its one tensor); see
    fresh_outputs_recorder."""
    import tvm
    from tvm import relax

    values = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value

    def resolve(expr):
        while isinstance(expr, relax.Var) and expr in values:
            expr = values[expr]
        return expr

    def fresh(expr) -> bool:
        expr = resolve(expr)
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
            return False
        if expr.op.name == "relax.builtin.alloc_tensor":
            return True
        return expr.op.name == "relax.reshape" and fresh(expr.args[0])

    result = resolve(main.body.body)
    return [fresh(field) for field in result.fields] if isinstance(result, relax.Tuple) else [fresh(result)]

