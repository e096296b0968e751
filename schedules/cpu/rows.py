"""Row-wise groups (softmax and log-softmax over the last axis, vector_math.py): every stage of a row computed in
one parallel iteration over the rows, so the row stays in L1 from its max to its normalized values.

Scheduled stage by stage at the root instead, each stage is a pass over the whole tensor, and the exponentials a
whole intermediate tensor: attention's 1x6x1500x1500 scores (54 MB) went through memory five times
(docs/decisions/vector-math.md). Within the row, a lane-partial reduction (ROW_PARTIALS) runs its vector of
partials over the row's vectors, and an elementwise stage runs whole vectors with its tail (the columns past the
last whole vector) as a scalar loop of its own.
"""

from __future__ import annotations

from ..analysis import ROLE, ROW_PARTIALS, root_blocks
from ..template import Declined
from .common import CpuTemplate, inline_injective, loop_extent, parallelize


def has_row_partials(func, kind, ctx) -> bool:  # noqa: ARG001 - the marker is in the func
    """A rule's claims: a reduction group with a lane-partial row reduction (vector_math's softmax)."""
    from tvm import s_tir

    return kind == "reduction" and any(info.block.annotations.get(ROLE) == ROW_PARTIALS
                                       for info in root_blocks(s_tir.Schedule(func), symbolic=True))


class RowTemplate(CpuTemplate):
    kind = "reduction"
    knobs = ()

    def __init__(self, func, ctx):
        from tvm import s_tir

        super().__init__(func, ctx)
        sch = s_tir.Schedule(func)
        infos = root_blocks(sch, symbolic=True)
        if any(None in info.extents for info in infos):
            raise Declined("needs static extents")
        shape = [int(d) for d in infos[-1].write_buffer().shape]
        self.rows = len(shape) - 1
        if any(list(info.extents[:self.rows]) != shape[:-1] for info in infos):
            raise Declined("a stage that does not run over the output's rows")

    def knob_space(self):
        return {}

    def default_knobs(self):
        return {}

    def apply(self, sch, knobs):  # noqa: ARG002 - no knobs
        inline_injective(sch)
        infos = root_blocks(sch, symbolic=True)
        row_loops = sch.get_loops(infos[-1].rv)[:self.rows]
        row = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
        for info in reversed(infos[:-1]):  # consumers first: each producer then lands ahead of them in the row
            sch.compute_at(info.rv, row)
        parallelize(sch, [row], self.spec.cores)
        for info in root_blocks(sch, symbolic=True):
            inner = sch.get_loops(info.rv)[1:]
            if info.block.annotations.get(ROLE) == ROW_PARTIALS:
                *_, lane, step = inner  # (..., lanes, the row's vectors)
                sch.reorder(step, lane)
                sch.vectorize(lane)
                sch.decompose_reduction(info.rv, step)
            elif not info.is_reduction and inner:
                self._vectorize_columns(sch, inner[-1])

    def _vectorize_columns(self, sch, columns) -> None:
        """Whole vectors of the row's columns, then the rest as a scalar loop."""
        lanes = self.spec.simd_width
        count = loop_extent(sch, columns)
        whole = count // lanes * lanes
        if not whole:
            return
        body = sch.loop_partition(columns, [whole, None])[0] if count != whole else columns
        sch.vectorize(sch.split(body, [None, lanes])[1])

    def finish(self, func):
        # the partition copies a stage's body, and with it the variables its Lets bind (vector_math's exp):
        # each copy gets its own
        import tvm

        renamed = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": func}))["main"]
        return super().finish(renamed)


__all__ = ["RowTemplate", "has_row_partials"]
