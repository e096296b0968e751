"""GPU schedules: the shared matrix-core template for matmuls the spec's tensor cores can run (matrix_core.py),
TVM's dlight rules for everything else (dlight_template.py)."""

from __future__ import annotations

from ..rules import Rule, any_group, dispatch
from ..template import Template
from .dlight_template import DlightTemplate
from .matrix_core import MatrixCoreTemplate, float32_gemm, legalize_map, matrix_core_intrinsics

# In order: the first rule that claims a group and whose template accepts it schedules it (rules.py).
RULES = [
    Rule("matrix_core", lambda func, kind, ctx: matrix_core_intrinsics(func, ctx) is not None, MatrixCoreTemplate),
    Rule("dlight", any_group, DlightTemplate),
]


def get_template(func, ctx, notes: list | None = None) -> Template:
    return dispatch(RULES, func, ctx, notes)


__all__ = ["RULES", "float32_gemm", "legalize_map", "get_template", "DlightTemplate", "MatrixCoreTemplate"]
