"""What every schedule template is: a knob space plus a way to apply one point of it.

A template reads the `HardwareSpec` (vector width, cores, caches, warp size, shared memory, ...) and the rest of
its `ScheduleContext` (context.py), never a vendor name. `default_knobs` is the safe, reasonably fast config used
before (or without) tuning; `knob_space` lists the values the tuner may try for each knob; `valid` filters
combinations that cannot build or are known bad. `knobs` declares every knob the space may hold, as data.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import random
from typing import Any

Knobs = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Knob:
    """A knob a template declares: its name, the type of its values (int, bool, or str for a choice among
    names), what it sets, and the cost model's feature slot for its value. A slot, once given, stays: a trained
    model reads each knob where it learned it; templates that share a knob name share its slot
    (costmodel/features.py collects the declarations and checks this)."""

    name: str
    type: type
    slot: int
    doc: str


class Declined(Exception):
    """A template's constructor saying "not mine": the group is of the template's kind but in a form it does not
    schedule (a symbolic extent it needs static, a dtype it has no instructions for). Dispatch (rules.py) tries
    the family's next rule and records the reason; any other exception out of a constructor is a bug."""


class Template(abc.ABC):
    #: group kind this template schedules: "conv", "matmul", "reduction", "pool", "injective", ...
    kind: str = ""
    #: every knob knob_space may hold (a group's space may hold fewer)
    knobs: tuple[Knob, ...] = ()
    #: groups whose best configs differ from this template's other groups', so that a zero-measurement verdict on
    #: some (costmodel.predict.template_key) never vouches for the others; "" where one verdict serves them all
    regime: str = ""

    def __init__(self, func, ctx):
        self.func = func  # tvm.tirx.PrimFunc, unscheduled
        self.ctx = ctx  # context.ScheduleContext, from the backend
        self.spec = ctx.spec  # backends.base.HardwareSpec

    @classmethod
    def create(cls, func, ctx, kind: str) -> Template:  # noqa: ARG003 - templates of one kind know it already
        """The template for a group of `kind` (schedules/rules.py); raises Declined for a form it does not take."""
        return cls(func, ctx)

    @abc.abstractmethod
    def knob_space(self) -> dict[str, list]:
        """knob name -> candidate values (every value a JSON scalar)."""

    @abc.abstractmethod
    def default_knobs(self) -> Knobs:
        """A config that is always valid and never slower than the untuned path."""

    def valid(self, knobs: Knobs) -> bool:  # noqa: ARG002 - templates override when combinations can clash
        return True

    @abc.abstractmethod
    def apply(self, sch, knobs: Knobs) -> None:
        """Schedule `sch` (a tvm.s_tir.Schedule over self.func) with `knobs`, in place."""

    # -- helpers shared by the tuner -------------------------------------------------------------------------

    def in_space(self, knobs: Knobs) -> bool:
        """`knobs` is a config of this template as it is now: the same knob names, each value one of its choices,
        valid together. A record from an older version of the template may not be (CPU templates' `schedule`
        would quietly fall back to the default for it, so its latency would label another program)."""
        space = self.knob_space()
        return (set(knobs) == set(space) and all(knobs[name] in values for name, values in space.items())
                and self.valid(knobs))

    def space_size(self) -> int:
        size = 1
        for values in self.knob_space().values():
            size *= max(1, len(values))
        return size

    def sample(self, rng: random.Random) -> Knobs:
        """A random valid config (falls back to the default when the space is mostly invalid)."""
        space = self.knob_space()
        for _ in range(64):
            knobs = {name: rng.choice(values) for name, values in space.items()}
            if self.valid(knobs):
                return knobs
        return self.default_knobs()

    def enumerate(self, limit: int | None = None):
        """Valid configs in a deterministic order (small spaces only)."""
        space = self.knob_space()
        names = list(space)
        count = 0
        for values in itertools.product(*(space[n] for n in names)):
            knobs = dict(zip(names, values))
            if self.valid(knobs):
                yield knobs
                count += 1
                if limit is not None and count >= limit:
                    return

    def fallback_schedule(self):
        """A safe scheduled PrimFunc for when this template's configs fail to apply, or None (no such thing)."""
        return None

    def schedule(self, knobs: Knobs | None = None):
        """Return the scheduled PrimFunc for `knobs` (default config when None); raises when the config does
        not apply, so a candidate is never silently measured as another config."""
        from tvm import s_tir

        sch = s_tir.Schedule(self.func)
        self.apply(sch, self.default_knobs() if knobs is None else knobs)
        return self.finish(sch.mod["main"])

    def finish(self, func):
        """The scheduled PrimFunc with what schedule primitives cannot express added (the CPU conv template's
        software prefetch); by default unchanged."""
        return func
