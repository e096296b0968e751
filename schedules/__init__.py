"""Schedule templates: one per operator-group kind, for CPUs (schedules/cpu) and GPUs (schedules/gpu).

Entry points used by the pipeline and the tuner:
- `legalize_map(spec)`: our lowering of heavy ops (e.g. conv2d / matmul with constant weights pre-packed into a
  vector-friendly layout), passed to relax's LegalizeOps.
- `classify(func)`: the group kind of a fused PrimFunc.
- `symbolic_vars(func)`: the symbolic dims in its shapes (such a func is not tuned; templates that can tile it
  around its symbolic dims still schedule it).
- `get_template(func, ctx, notes)`: the Template that schedules it for a backend's `ScheduleContext`
  (`Backend.schedule_context()`), by the family's ordered rules (rules.py;
  a template declining the group is noted in `notes`). `template.schedule(knobs)` raises for a config it cannot
  apply; xcomp.pipeline.schedule_group owns the fallbacks from there.
"""

from __future__ import annotations

from .context import ScheduleContext
from .template import Declined, Knobs, Template


def _family(spec):
    if spec.is_gpu:
        from . import gpu

        return gpu
    from . import cpu

    return cpu


def legalize_map(spec) -> dict:
    return _family(spec).legalize_map(spec)


def classify(func) -> str:
    from .analysis import classify as _classify

    return _classify(func)


def symbolic_vars(func) -> list:
    from .analysis import symbolic_vars as _symbolic_vars

    return _symbolic_vars(func)


def get_template(func, ctx: ScheduleContext, notes: list | None = None) -> Template:
    return _family(ctx.spec).get_template(func, ctx, notes)


__all__ = ["Declined", "Knobs", "ScheduleContext", "Template", "legalize_map", "classify", "symbolic_vars",
           "get_template"]
