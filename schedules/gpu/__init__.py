"""GPU schedules: the shared matrix-core template for matmuls the spec's tensor cores can run (matrix_core.py),
TVM's dlight rules for everything else (dlight_template.py)."""

from __future__ import annotations

from ..template import Template
from .dlight_template import DlightTemplate
from .matrix_core import MatrixCoreTemplate, legalize_map, matrix_core_intrinsics


def get_template(func, spec) -> Template:
    intrinsics = matrix_core_intrinsics(func, spec)
    if intrinsics is not None:
        return MatrixCoreTemplate(func, spec, intrinsics)
    return DlightTemplate(func, spec)


__all__ = ["legalize_map", "get_template", "DlightTemplate", "MatrixCoreTemplate"]
