"""CPU schedule templates: our conv2d / matmul lowering with pre-packed constant weights (legalize.py), and one
template per group kind, all sized from the HardwareSpec (vector lanes, cores)."""

from __future__ import annotations

from ..analysis import is_winograd, root_blocks
from ..rules import Rule, any_group, dispatch, of_kind
from .common import CpuTemplate, GenericTemplate
from .conv import ConvTemplate
from .legalize import legalize_map
from .matmul import MatmulTemplate
from .winograd import WinogradTemplate

# In order: the first rule that claims a group and whose template accepts it schedules it (rules.py).
RULES = [
    Rule("winograd", lambda func, kind, ctx: kind == "conv" and _is_winograd(func), WinogradTemplate),
    Rule("conv", of_kind("conv"), ConvTemplate),
    Rule("matmul", of_kind("matmul"), MatmulTemplate),
    Rule("generic", any_group, GenericTemplate),
]


def get_template(func, ctx, notes: list | None = None) -> CpuTemplate:
    """The template for a fused PrimFunc; a specialised template that declines the group (a symbolic extent it
    needs static, a dtype it does not vectorize) leaves it to the generic one, and says why in `notes`."""
    return dispatch(RULES, func, ctx, notes)


def _is_winograd(func) -> bool:
    from tvm import s_tir

    return is_winograd(root_blocks(s_tir.Schedule(func), symbolic=True))


__all__ = ["RULES", "legalize_map", "get_template"]
