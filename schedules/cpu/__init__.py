"""CPU schedule templates: our conv2d / matmul lowering with pre-packed constant weights (legalize.py), and one
template per group kind, all sized from the HardwareSpec (vector lanes, cores)."""

from __future__ import annotations

from ..analysis import classify, is_winograd, root_blocks, symbolic_vars
from .common import CpuTemplate, GenericTemplate
from .conv import ConvTemplate
from .legalize import legalize_map
from .matmul import MatmulTemplate
from .winograd import WinogradTemplate

_TEMPLATES = {"conv": ConvTemplate, "matmul": MatmulTemplate}


def get_template(func, spec) -> CpuTemplate:
    """The template for a fused PrimFunc; the generic one when the specialised template cannot read it, or when
    a shape is symbolic where the template needs it static (the conv template takes a symbolic batch, the matmul
    template a symbolic M and batch; each raises for the rest)."""
    kind = classify(func)
    template = _TEMPLATES.get(kind) if kind in ("conv", "matmul") or not symbolic_vars(func) else None
    if kind == "conv" and _is_winograd(func):
        template = WinogradTemplate
    if template is not None:
        try:
            return template(func, spec)
        except Exception:  # a func of this kind in a shape the template does not expect
            pass
    return GenericTemplate(func, spec, kind)


def _is_winograd(func) -> bool:
    from tvm import s_tir

    return is_winograd(root_blocks(s_tir.Schedule(func), symbolic=True))


__all__ = ["legalize_map", "get_template"]
