"""Template dispatch: each family (cpu/, gpu/) keeps one ordered list of rules, and the first rule that claims a
group and whose template accepts it schedules it.

A rule claims by a cheap test of the group (its kind, a marker block, a dtype); the template's constructor may then
decline with `Declined`, which dispatch records as a note and answers with the next rule. Nothing else is caught:
an error in a template is a bug and reaches the caller, instead of a silently slower fallback.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .template import Declined, Template


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    claims: Callable  # (func, kind, ctx: ScheduleContext) -> bool
    template: type[Template]  # built by Template.create(func, ctx, kind), which may raise Declined


def any_group(func, kind, ctx) -> bool:  # noqa: ARG001 - a family's last rule takes what the others left
    return True


def of_kind(*kinds: str) -> Callable:
    return lambda func, kind, ctx: kind in kinds  # noqa: ARG005


def dispatch(rules: list[Rule], func, ctx, notes: list | None = None) -> Template:
    """The template of the first rule that claims `func` and does not decline it. Each decline appends
    "<rule> template declined: <reason>" to `notes`; when every claiming rule declines, raises Declined."""
    from .analysis import classify

    kind = classify(func)
    declines = []
    for rule in rules:
        if not rule.claims(func, kind, ctx):
            continue
        try:
            return rule.template.create(func, ctx, kind)
        except Declined as why:
            declines.append(f"{rule.name} template declined: {why}")
            if notes is not None:
                notes.append(declines[-1])
    raise Declined(f"no template for this {kind} group ({'; '.join(declines) or 'no rule claims it'})")


__all__ = ["Rule", "any_group", "of_kind", "dispatch"]
