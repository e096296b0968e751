"""Attention in one group: scores = q k^T (with the model's scaling or mask on them), their softmax, and its
product with v, a block of query rows at a time.

As three groups, the scores of every head went through memory between them: whisper's encoder writes 6 x 1500 x
1500 scores (54 MB) per layer, reads them back for the softmax, writes the probabilities and reads them again for
the product with v. Here a parallel task takes `rows` query rows of one head and keeps their scores and
exponentials (rows x the key length) in its own cache: the two products run as register tiles like the matmul
template's, and the softmax between them in vector lanes like the row template's (docs/decisions/attention.md).

The graph pass (xcomp/graph/attention.py) builds the group with `attention_compute` and pads k^T's key axis to
whole vectors: the scores' tiles then need no tail. The padded keys' logits are -inf, so their exponentials are 0.
"""

from __future__ import annotations

from ..analysis import ROLE, ROW_PARTIALS, root_blocks, with_role
from ..template import Declined, Knob
from . import nest
from .common import CpuTemplate, divisors, inline_injective, vector_registers
from .rows import split_whole_vectors, vectorize_partials

SCORES = "attention_scores"  # the q k^T block
WEIGHTED = "attention_weighted"  # the exponentials times v
# on the scores block: the logits of query m are the least float past key m + this offset (a causal mask), and
# what follows adds nothing that could raise them: those keys' exponentials are 0, and a task skips their work
CAUSAL = "xcomp.causal_offset"
# on a loop over keys (`finish` bounds it to the keys the task's causal rows see): the keys one step covers,
# the offset, the task's rows and the tasks per head
CAUSAL_KEYS = "xcomp.causal_keys"

# Query rows a task takes: its scores and exponentials (2 x rows x keys floats) stay in its core's L2.
ROW_CHOICES = (4, 6, 8, 10, 12, 16, 20, 24, 30, 32)
MIN_ROWS = ROW_CHOICES[0]  # fewer query rows are not fused (xcomp/graph/attention.py)
MR_CHOICES = (1, 2, 3, 4, 5, 6, 8)


def attention_compute(q, kt, v, keys: int, logits, causal_offset=None):
    """TE stages of softmax(logits(q k^T)) v over the last axes of q [..., M, D], kt [..., D, K'] (K' >= keys,
    the columns past `keys` padding) and v [..., keys, E]; `logits(score, index)` gives the softmax's input for a
    score at index (..., m, key). `causal_offset`: see CAUSAL."""
    from tvm import te, tirx

    from .vector_math import softmax_inverse, softmax_stages

    *batch, rows, depth = q.shape
    padded = kt.shape[-1]
    d = te.reduce_axis((0, depth), name="d")
    scores = te.compute((*batch, rows, padded), lambda *i: te.sum(q(*i[:-1], d) * kt(*i[:-2], d, i[-1]), axis=d),
                        name="T_attention_scores",
                        attrs={ROLE: SCORES, **({} if causal_offset is None else {CAUSAL: causal_offset})})

    def logit(*i):
        # the padding's logits are -inf, so their exponentials are 0; the model's own terms (a mask) are read at
        # the last key there, in bounds
        key = i[-1]
        value = logits(scores(*i), (*i[:-1], tirx.min(key, keys - 1)))
        return tirx.Select(key < keys, value, tirx.const(float("-inf"), "float32"))

    # over the padded keys: the softmax's rows are then whole vectors, and its stages read every score the
    # tiles compute (computing only the first `keys`, the tiles' vectors would be predicated)
    x = te.compute((*batch, rows, padded), logit, name="T_attention_logits")
    _, exps, total = softmax_stages(x, len(x.shape) - 1)
    inverse = softmax_inverse(total)
    j = te.reduce_axis((0, keys), name="j")
    weighted = te.compute((*batch, rows, v.shape[-1]),
                          lambda *i: te.sum(exps(*i[:-1], j) * v(*i[:-2], j, i[-1]), axis=j),
                          name="T_attention_weighted", attrs={ROLE: WEIGHTED})
    return te.compute(weighted.shape, lambda *i: weighted(*i) * inverse(*i[:-1], 0), name="T_attention")


def is_attention(func, kind, ctx) -> bool:  # noqa: ARG001 - the marker is in the func
    """A rule's claims: a group built by attention_compute."""
    from tvm import s_tir

    return kind == "matmul" and with_role(root_blocks(s_tir.Schedule(func), symbolic=True), SCORES) is not None


class AttentionTemplate(CpuTemplate):
    kind = "matmul"
    knobs = (Knob("rows", int, 29, "query rows a parallel task takes"),
             Knob("mr", int, 10, "rows of the register tile"),
             Knob("nr", int, 11, "vectors of output columns in the register tile"))

    def __init__(self, func, ctx):
        from tvm import s_tir

        super().__init__(func, ctx)
        infos = root_blocks(s_tir.Schedule(func), symbolic=True)
        scores, weighted = with_role(infos, SCORES), with_role(infos, WEIGHTED)
        if any(e is None for info in infos for e in info.extents):
            raise Declined("schedules static shapes only")
        *_, self.m, self.padded, _ = scores.extents
        self.e = weighted.extents[-2]
        self.lanes = self.spec.simd_width
        if self.padded % self.lanes or self.e % self.lanes:
            raise Declined("the key padding or v's width is not a whole number of vectors")
        if self.m < MIN_ROWS:
            raise Declined(f"fewer than {MIN_ROWS} query rows")
        self.registers = vector_registers(self.spec)
        offset = scores.block.annotations.get(CAUSAL)
        self.causal = None if offset is None else int(offset)

    def knob_space(self):
        # a row count that does not divide M leaves the last task fewer rows (its tiles predicated by row)
        rows = [r for r in ROW_CHOICES if r <= self.m]
        return {"rows": rows,
                "mr": [m for m in MR_CHOICES if m <= max(rows)],
                "nr": divisors(self.padded // self.lanes, 8)}

    def valid(self, knobs):
        mr, nr = knobs["mr"], knobs["nr"]
        # the scores' tile (mr x nr vectors) and the weighted tile (mr x v's vectors) both fit in registers
        return (knobs["rows"] % mr == 0 and mr * nr + nr + 1 <= self.registers
                and mr * (self.e // self.lanes) + self.e // self.lanes + 1 <= self.registers)

    def default_knobs(self):
        def cost(knobs):
            mr, nr = knobs["mr"], knobs["nr"]
            return (mr * nr, -(mr + 2 * nr), knobs["rows"])

        return max(self.enumerate(), key=cost)

    def apply(self, sch, knobs):
        inline_injective(sch)
        infos = root_blocks(sch)
        scores, weighted = with_role(infos, SCORES).rv, with_role(infos, WEIGHTED).rv
        scores_out = sch.cache_write(scores, 0, "local")
        weighted_out = sch.cache_write(weighted, 0, "local")
        out = root_blocks(sch)[-1].rv
        *batch, i, _ = sch.get_loops(out)
        tasks, _ = sch.split(i, [None, knobs["rows"]])
        task = sch.fuse(*batch, tasks) if batch else tasks
        sch.parallel(task)
        for info in reversed(root_blocks(sch)[:-1]):  # consumers first, as compute_at needs
            sch.compute_at(info.rv, task)
        score_keys, _ = self._tile(sch, scores, scores_out, knobs["mr"], knobs["nr"])
        _, weighted_keys = self._tile(sch, weighted, weighted_out, knobs["mr"], self.e // self.lanes)
        if self.causal is not None:  # the loops over keys, each bounded to its task's in `finish`
            per_head = -(-self.m // knobs["rows"])
            for loop, width in ((score_keys, knobs["nr"] * self.lanes), (weighted_keys, 1)):
                sch.annotate(loop, CAUSAL_KEYS, [width, self.causal, knobs["rows"], per_head])
        for info in root_blocks(sch):
            if info.rv in (scores, weighted, scores_out, weighted_out):
                continue
            inner = sch.get_loops(info.rv)[1:]
            if info.block.annotations.get(ROLE) == ROW_PARTIALS:
                vectorize_partials(sch, info.rv, inner)
            elif not info.is_reduction and inner:
                split_whole_vectors(sch, inner[-1], self.lanes)
        split_whole_vectors(sch, sch.get_loops(out)[-1], self.lanes)

    def _tile(self, sch, block, write_back, mr, nr):
        """A register tile of mr rows x nr vectors, the reduction inside it, written back per tile. Returns the
        loops over the tiles' columns and over the reduction (the keys are the scores' columns and the product
        with v's reduction)."""
        rows, columns, reduction = sch.get_loops(block)[1:]
        ro, ri = sch.split(rows, [None, mr])
        co, cr, cv = sch.split(columns, [None, nr, self.lanes])
        sch.reorder(co, ro, reduction, ri, cr, cv)
        sch.unroll(ri)
        sch.unroll(cr)
        sch.vectorize(cv)
        sch.reverse_compute_at(write_back, ro)
        wr, wc = sch.get_loops(write_back)[-2:]
        wco, wcv = sch.split(wc, [None, self.lanes])
        sch.unroll(wr)
        sch.unroll(wco)
        sch.vectorize(wcv)
        sch.decompose_reduction(block, reduction)
        return co, reduction

    def finish(self, func):
        if self.causal is not None:
            body = nest.rebuild(func.body, _causal_keys_only)
            func = func if body.same_as(func.body) else nest.in_ssa_form(func.with_body(body))
        return super().finish(func)


def _causal_keys_only(loop, body, path):
    """A CAUSAL_KEYS loop bounded to the keys its task's rows see: a task of `rows` query rows from r0 sees the
    keys below r0 + rows + offset. The task is the parallel loop around everything (AttentionTemplate.apply)."""
    from tvm import tirx

    marks = loop.annotations.get(CAUSAL_KEYS) if loop.annotations else None
    if marks is None:
        return nest.loop_with(loop, body)
    width, offset, rows, per_head = (int(x) for x in marks)
    task = path[0].loop_var
    dtype = str(loop.extent.ty)
    first = tirx.floormod(task, per_head) * rows
    first = first if str(first.ty) == dtype else tirx.Cast(dtype, first)
    seen = tirx.floordiv(first + tirx.const(rows + offset + width - 1, dtype), tirx.const(width, dtype))
    return tirx.For(loop.loop_var, loop.min, tirx.min(loop.extent, seen), loop.kind, body, loop.thread_binding,
                    {k: v for k, v in loop.annotations.items() if k != CAUSAL_KEYS})


__all__ = ["AttentionTemplate", "attention_compute", "is_attention"]
