"""Fuse attention, `matmul(softmax(logits(matmul(q, k^T))), v)`, into one group (schedules/cpu/attention.py).

`logits` is what models put between the scores and the softmax: scalings by a constant, added masks and causal
masks selecting between the scores and a constant, in any order, and casts of float32 to float32. It fuses where
every intermediate has no other use, every shape is static, v's rows are whole vectors and the scores of one batch
entry are larger than the L2 caches of all cores together. Smaller scores stay in those caches between the three
groups, and there the three ran as fast or faster (docs/decisions/attention.md).
"""

from __future__ import annotations

from xcomp.graph.passes import is_op, static_shape
from xcomp.schedules.cpu.attention import MIN_ROWS
from xcomp.schedules.cpu.legalize import constant_f32

# the logits steps the fused group computes, each as f(score, its operands): a constant or a mask combined with
# the scores, or a mask selecting between the scores and a constant
_STEPS = {"add": lambda s, o: s + o[0], "subtract": lambda s, o: s - o[0], "multiply": lambda s, o: s * o[0],
          "divide": lambda s, o: s / o[0], "where": lambda s, o: _select(o[0], s, o[1]),
          "where_else": lambda s, o: _select(o[0], o[1], s)}


# a spec that does not know its L2 (a hand-made one) gets the 1 MiB of the cores this was measured on: with 0 every
# attention would fuse, the small ones slower (docs/decisions/attention.md)
UNKNOWN_L2 = 1 << 20


def _select(condition, true_value, false_value):
    from tvm import tirx

    return tirx.Select(condition, true_value, false_value)


def _is_noop_cast(expr):
    return is_op(expr, "relax.astype") and str(expr.attrs.dtype) == str(expr.args[0].ty.dtype)


def padded_keys(keys: int, lanes: int) -> int:
    """The key length rounded up to whole pairs of vectors, or to fours where that adds at most a sixteenth: the
    scores' register tiles then have widths of 2 (or 4) vectors to choose from. 197 keys rounded to 13 vectors
    left only tiles of one vector."""
    four = -(-keys // (4 * lanes)) * 4 * lanes
    return four if (four - keys) * 16 <= keys else -(-keys // (2 * lanes)) * 2 * lanes


def _use_counts(func):
    """How many times each relax.Var is read in `func` (the visit reaches every use of a var, not its binding)."""
    from collections import Counter

    from tvm import relax

    counts = Counter()
    relax.analysis.post_order_visit(func, lambda expr: counts.update([expr]) if isinstance(expr, relax.Var) else None)
    return counts


def _as_scalar(expr):
    """A one-element float32 constant's value, else None."""
    value = constant_f32(expr)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


class _Match:
    """One attention found: its operands and the logits steps between the scores and the softmax."""

    def __init__(self, q, kt, v, steps, shape):
        self.q, self.kt, self.v, self.shape = q, kt, v, shape
        # (step, [a float or a tensor per operand]): a one-element constant goes into the group's code, and a
        # division by it becomes a product with its inverse (a vector division per score took longer than the
        # scores' FMAs)
        self.steps = []
        for kind, operands in steps:
            scalars = [_as_scalar(x) for x in operands]
            if kind == "divide" and scalars[0] is not None:
                kind, scalars = "multiply", [1.0 / scalars[0]]
            self.steps.append((kind, [x if scalar is None else scalar for x, scalar in zip(operands, scalars)]))

    def causal_offset(self):
        """c where the logits are causal: a where step keeps the scores for key <= query + c (c >= 0, so every
        query keeps a key) from a constant mask, and puts the least float elsewhere, and only additions follow;
        else None (schedules/cpu/attention.py's CAUSAL)."""
        offset = None
        for kind, operands in self.steps:
            if kind == "where":
                mask, other = operands
                least = isinstance(other, float) and other <= -1e30
                offset = _causal_mask_offset(mask, self.shape) if least else None
            elif kind != "add":
                offset = None
        return offset

    def tensors(self):
        """The tensors the logits steps read: inputs of the group."""
        return [x for _, operands in self.steps for x in operands if not isinstance(x, float)]


def _causal_mask_offset(mask, scores_shape):
    """c when `mask` is a constant broadcast over every axis but the scores' last two, where it is true for
    key <= query + c and false elsewhere, with c >= 0; else None."""
    import numpy as np
    import tvm

    if not isinstance(mask, tvm.ir.expr.Constant):
        return None
    value = mask.value.numpy()
    queries, keys = scores_shape[-2:]
    if value.dtype != np.bool_ or value.shape[-2:] != (queries, keys) or value.size != queries * keys:
        return None
    value = value.reshape(queries, keys)
    offset = int(value[0].sum()) - 1
    causal = np.tril(np.ones((queries, keys), bool), offset)
    return offset if offset >= 0 and np.array_equal(value, causal) else None


def fuse_attention(mod, lanes: int, l2_bytes: int):
    """`mod` with every attention (module docstring) whose scores per batch entry exceed `l2_bytes` computed
    by one call of an attention group; k^T's key axis is padded first (padded_keys)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from xcomp.graph.passes import bound_value

    @mutator
    class _Fuser(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.uses = None

        def single_use(self, var):
            return isinstance(var, relax.Var) and self.uses.get(var, 0) == 1

        def step_from(self, var):
            """The producer of `var` when it is a single-use intermediate, else None."""
            return bound_value(self, var) if self.single_use(var) else None

        def match(self, call):
            if not is_op(call, "relax.matmul") or str(call.ty.dtype) != "float32":
                return None
            probs, v = call.args
            softmax = self.step_from(probs)
            while _is_noop_cast(softmax):  # exporters cast the probabilities to v's dtype, float32 already
                softmax = self.step_from(softmax.args[0])
            if not is_op(softmax, "relax.nn.softmax"):
                return None
            x = softmax.args[0]
            if int(softmax.attrs.axis) not in (-1, x.ty.ndim - 1):
                return None
            steps = []
            while True:
                value = self.step_from(x)
                if value is None:
                    return None
                if is_op(value, "relax.matmul"):
                    break
                if _is_noop_cast(value):
                    x = value.args[0]
                    continue
                step = _logits_step(value)
                if step is None:
                    return None
                steps.append(step[:2])
                x = step[2]
            q, kt = value.args
            shapes = [static_shape(e.ty) for e in (q, kt, v, x)]
            if None in shapes or any(str(e.ty.dtype) != "float32" for e in (q, kt, v)):
                return None
            qs, ks, vs, ss = shapes
            if not (len(qs) == len(ks) == len(vs) >= 3 and qs[:-2] == ks[:-2] == vs[:-2] and vs[-2] == ks[-1]):
                return None
            # the template tiles v's columns in whole vectors, and gives each task several query rows (a few
            # rows, a decode step's, are dot products along k's rows: the matmul template's)
            if vs[-1] % lanes or qs[-2] < MIN_ROWS:
                return None
            if ss[-1] * ss[-2] * 4 * (ss[-3] if len(ss) > 3 else 1) <= l2_bytes:
                return None
            return _Match(q, kt, v, list(reversed(steps)), ss)

        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            found = self.match(call)
            if found is None:
                return call
            keys = found.shape[-1]
            padded = padded_keys(keys, lanes)
            kt = found.kt
            if padded != keys:
                widths = [0] * (2 * (kt.ty.ndim - 1)) + [0, padded - keys]
                kt = self.builder_.emit(relax.op.nn.pad(kt, widths))
            build = _compute(found.steps, keys, found.causal_offset())
            return self.builder_.call_te(build, found.q, kt, found.v, *found.tensors(), primfunc_name_hint="attention")

    fuser = _Fuser(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            fuser.uses = _use_counts(func)
            fuser.builder_.update_func(gv, fuser.visit_expr(func))
    return fuser.builder_.get()


def _logits_step(value):
    """(step, its operands, the scores' side) for a logits step, else None: a binary op whose other operand (a
    constant, a mask) broadcasts to the scores, or where(mask, scores, other) / where(mask, other, scores)."""
    name = getattr(value.op, "name", "").removeprefix("relax.")
    shape = static_shape(value.ty)
    if name == "where":
        condition, first, second = value.args
        if static_shape(first.ty) == shape:
            return "where", [condition, second], first
        return ("where_else", [condition, first], second) if static_shape(second.ty) == shape else None
    if name not in _STEPS:
        return None
    lhs, rhs = value.args
    if static_shape(lhs.ty) == shape:
        return name, [rhs], lhs
    if static_shape(rhs.ty) == shape and name in ("add", "multiply"):
        return name, [lhs], rhs
    return None


def _compute(steps, keys: int, causal_offset):
    """The TE builder of the attention group for `steps` (call_te's function, given the tensors they read)."""
    from tvm import tirx

    from xcomp.schedules.cpu.attention import attention_compute

    def build(q, kt, v, *tensors):
        bound = iter(tensors)
        ops = [(kind, [x if isinstance(x, float) else next(bound) for x in operands]) for kind, operands in steps]

        def logits(score, index):
            for kind, operands in ops:
                values = [tirx.const(x, "float32") if isinstance(x, float) else _broadcast_read(x, index)
                          for x in operands]
                score = _STEPS[kind](score, values)
            return score

        return attention_compute(q, kt, v, keys, logits, causal_offset)

    return build


def _broadcast_read(tensor, index):
    """tensor at `index` under numpy broadcasting: its dims aligned right, a dim of 1 read at 0."""
    shape = list(tensor.shape)
    aligned = index[len(index) - len(shape):]
    return tensor(*[0 if int(d) == 1 else i for d, i in zip(shape, aligned)])


def FuseAttention(spec):  # noqa: N802 (named like the TVM passes it sits among)
    """The Relax module pass running fuse_attention for a CPU `spec`: scores larger than the L2 caches of all its
    cores together are fused, since smaller ones stay in those caches between the three groups."""
    import tvm

    l2 = (spec.cache_bytes[1] or UNKNOWN_L2) * spec.cores

    @tvm.ir.transform.module_pass(opt_level=0, name="xcomp.FuseAttention")
    def _pass(mod, ctx):  # noqa: ARG001
        return fuse_attention(mod, spec.simd_width, l2)

    return _pass
