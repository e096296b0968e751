"""Fuse attention, `matmul(softmax(logits(matmul(q, k^T))), v)`, into one group (schedules/cpu/attention.py).

`logits` is what models put between the scores and the softmax: a scaling by a constant and an added mask, in
any order. It fuses where every intermediate has no other use, every shape is static, v's rows are whole vectors
and the scores of one batch entry are larger than the L2 caches of all cores together. Smaller scores stay in
those caches between the three groups, and there the three ran as fast or faster (docs/decisions/attention.md).
"""

from __future__ import annotations

# the logits ops the fused group computes: binary ops with a constant or a mask broadcast to the scores
_BINARY = {"relax.add": lambda a, b: a + b, "relax.subtract": lambda a, b: a - b,
           "relax.multiply": lambda a, b: a * b, "relax.divide": lambda a, b: a / b}


def _is_op(expr, name):
    import tvm
    from tvm import relax

    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def _static_shape(expr):
    """The static shape of a tensor expression as ints, else None."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not all(hasattr(d, "value") for d in shape):
        return None
    return [int(d) for d in shape]


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
    """A one-element float constant's value, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    value = expr.value.numpy()
    return float(value.reshape(())) if value.size == 1 and value.dtype.kind == "f" else None


class _Match:
    """One attention found: its operands and the logits steps between the scores and the softmax."""

    def __init__(self, q, kt, v, steps, shape):
        self.q, self.kt, self.v, self.shape = q, kt, v, shape
        # (op, a float or a tensor): a one-element constant goes into the group's code, and a division by it
        # becomes a product with its inverse (a vector division per score took longer than the scores' FMAs)
        self.steps = []
        for name, other in steps:
            scalar = _as_scalar(other)
            if scalar is not None and name == "relax.divide":
                name, scalar = "relax.multiply", 1.0 / scalar
            self.steps.append((name, other if scalar is None else scalar))

    def tensors(self):
        """The tensors the logits steps read: inputs of the group."""
        return [other for _, other in self.steps if not isinstance(other, float)]


def fuse_attention(mod, lanes: int, l2_bytes: int):
    """`mod` with every attention (module docstring) whose scores per batch entry exceed `l2_bytes` computed
    by one call of an attention group; k^T's key axis is padded to whole vectors of `lanes` first."""
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
            if not _is_op(call, "relax.matmul") or str(call.ty.dtype) != "float32":
                return None
            probs, v = call.args
            softmax = self.step_from(probs)
            if not _is_op(softmax, "relax.nn.softmax"):
                return None
            x = softmax.args[0]
            if int(softmax.attrs.axis) not in (-1, x.ty.ndim - 1):
                return None
            steps = []
            while True:
                value = self.step_from(x)
                if value is None:
                    return None
                if _is_op(value, "relax.matmul"):
                    break
                step = _logits_step(value)
                if step is None:
                    return None
                steps.append(step[:2])
                x = step[2]
            q, kt = value.args
            shapes = [_static_shape(e) for e in (q, kt, v, x)]
            if None in shapes or any(str(e.ty.dtype) != "float32" for e in (q, kt, v)):
                return None
            qs, ks, vs, ss = shapes
            if not (len(qs) == len(ks) == len(vs) >= 3 and qs[:-2] == ks[:-2] == vs[:-2] and vs[-2] == ks[-1]):
                return None
            if vs[-1] % lanes:  # the template tiles v's columns in whole vectors
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
            return self.builder_.call_te(_compute(found.steps, keys), found.q, kt, found.v, *found.tensors(),
                                         primfunc_name_hint="attention")

    fuser = _Fuser(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            fuser.uses = _use_counts(func)
            fuser.builder_.update_func(gv, fuser.visit_expr(func))
    return fuser.builder_.get()


def _logits_step(value):
    """(op, the other operand, the scores' side) for a logits step, else None: a binary op whose other operand
    (a constant, a mask) broadcasts to the scores."""
    name = getattr(value.op, "name", None)
    if name not in _BINARY:
        return None
    lhs, rhs = value.args
    shape = _static_shape(value)
    if _static_shape(lhs) == shape:
        return name, rhs, lhs
    if _static_shape(rhs) == shape and name in ("relax.add", "relax.multiply"):
        return name, lhs, rhs
    return None


def _compute(steps, keys: int):
    """The TE builder of the attention group for `steps` (call_te's function, given the tensors they read)."""
    from tvm import tirx

    from xcomp.schedules.cpu.attention import attention_compute

    def build(q, kt, v, *tensors):
        bound = iter(tensors)
        ops = [(name, other if isinstance(other, float) else next(bound)) for name, other in steps]

        def logits(score, index):
            for name, other in ops:
                value = tirx.const(other, "float32") if isinstance(other, float) else _broadcast_read(other, index)
                score = _BINARY[name](score, value)
            return score

        return attention_compute(q, kt, v, keys, logits)

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

    l2 = spec.cache_bytes[1] * spec.cores if len(spec.cache_bytes) > 1 else 0

    @tvm.ir.transform.module_pass(opt_level=0, name="xcomp.FuseAttention")
    def _pass(mod, ctx):  # noqa: ARG001
        return fuse_attention(mod, spec.simd_width, l2)

    return _pass
