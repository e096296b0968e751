"""Default GPU schedules: TVM's dlight rules applied for the spec's target (see dlight_template.py)."""

from __future__ import annotations

from .dlight_template import DlightTemplate


def legalize_map(spec) -> dict:  # noqa: ARG001 - dlight's rules recognise TVM's own legalization
    return {}


def get_template(func, spec) -> DlightTemplate:
    return DlightTemplate(func, spec)


__all__ = ["legalize_map", "get_template", "DlightTemplate"]
