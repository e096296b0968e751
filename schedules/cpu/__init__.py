"""CPU schedule templates: our conv2d / matmul lowering with pre-packed constant weights (legalize.py), and one
template per group kind, all sized from the HardwareSpec (vector lanes, cores)."""

from __future__ import annotations

from ..rules import Rule, any_group, dispatch, of_kind
from .attention import AttentionTemplate, is_attention
from .common import CpuTemplate, GenericTemplate
from .conv import of_form
from .conv_blocked import BlockedConvTemplate
from .conv_depthwise import BlockedDepthwiseConvTemplate, DepthwiseConvTemplate
from .conv_packed import PackedConvTemplate
from .conv_unpacked import UnpackedConvTemplate
from .legalize import legalize_map
from .matmul import MatmulTemplate
from .rows import RowTemplate, has_row_partials
from .winograd import WinogradTemplate

# In order: the first rule that claims a group and whose template accepts it schedules it (rules.py).
RULES = [
    # a conv group has one form (conv.conv_form): the template of its form schedules it, or the generic one
    Rule("winograd", of_form("winograd"), WinogradTemplate),
    Rule("conv_blocked", of_form("blocked"), BlockedConvTemplate),
    Rule("conv_packed", of_form("packed"), PackedConvTemplate),
    Rule("conv_depthwise", of_form("depthwise"), DepthwiseConvTemplate),
    Rule("conv_depthwise_blocked", of_form("depthwise_blocked"), BlockedDepthwiseConvTemplate),
    Rule("conv_unpacked", of_form("unpacked"), UnpackedConvTemplate),
    Rule("attention", is_attention, AttentionTemplate),
    Rule("matmul", of_kind("matmul"), MatmulTemplate),
    Rule("rows", has_row_partials, RowTemplate),
    Rule("generic", any_group, GenericTemplate),
]


def get_template(func, ctx, notes: list | None = None) -> CpuTemplate:
    """The template for a fused PrimFunc; a specialised template that declines the group (a symbolic extent it
    needs static, a dtype it does not vectorize) leaves it to the generic one, and says why in `notes`."""
    return dispatch(RULES, func, ctx, notes)


__all__ = ["RULES", "legalize_map", "get_template"]
