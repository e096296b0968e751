"""Features of one candidate: the scheduled program, its knobs, and the hardware it runs on.

Program features are TVM MetaSchedule's PerStoreFeature (164 numbers per buffer store: arithmetic counts,
loop structure, vectorization, parallelism, memory access patterns, ...) reduced over stores by sum and max, so
every candidate has one fixed-length row. Knob values and HardwareSpec numbers are appended, so one model can rank
candidates of different templates and targets.
"""

from __future__ import annotations

import functools
import math
import zlib

import numpy as np

from xcomp.schedules.analysis import KINDS  # the group kinds, one-hot in this order
from xcomp.schedules.template import Knob

# Bumped whenever the encoding changes, so a model trained on another encoding is not loaded. 3: categorical knobs
# hashed with crc32 (stable across processes), each knob name in its own slot (docs/decisions/costmodel-features.md)
FEATURES_VERSION = 3
PER_STORE = 164
KNOB_SLOTS = 32
# Knobs no template declares any more whose slots stay taken, so older databases' records still featurize and no
# new knob reads a meaning the shipped model learned for them. "prefetch": the CPU templates decide it from the
# hardware (docs/decisions/software-prefetch.md).
RETIRED_KNOBS = (Knob("prefetch", bool, 27, "software prefetch of the next weights (retired)"),)
LENGTH = 2 * PER_STORE + KNOB_SLOTS + len(KINDS) + 6


@functools.cache
def knob_slots() -> dict:
    """{knob name: feature slot}, from the knobs every CPU and GPU template declares (Template.knobs) and the
    retired ones. Raises when two declarations of one name disagree on its slot, two names share a slot, or a
    slot is out of range: a trained model must read each knob where it learned it."""
    from xcomp.schedules.cpu import RULES as CPU_RULES
    from xcomp.schedules.gpu import RULES as GPU_RULES

    declared = {}
    for knob in (*RETIRED_KNOBS, *(k for rule in (*CPU_RULES, *GPU_RULES) for k in rule.template.knobs)):
        if declared.setdefault(knob.name, knob.slot) != knob.slot:
            raise ValueError(f"knob {knob.name!r} is declared with slots {declared[knob.name]} and {knob.slot}")
    slots = sorted(declared.values())
    if len(set(slots)) != len(slots) or not all(0 <= s < KNOB_SLOTS for s in slots):
        raise ValueError(f"knob slots must be distinct and in 0..{KNOB_SLOTS - 1}: {declared}")
    return declared


def _knob_number(value) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return math.log2(1.0 + abs(float(value)))
    return float(zlib.crc32(str(value).encode()) % 997) / 997.0  # categorical: the same scalar in every process


def knob_vector(knobs: dict) -> np.ndarray:
    """Each knob's value in its own slot (0 where a template has no such knob)."""
    slots = knob_slots()
    vector = np.zeros(KNOB_SLOTS, np.float32)
    for name, value in knobs.items():
        if name not in slots:
            raise ValueError(f"knob {name!r} is declared by no template: add a Knob to its template's `knobs`")
        vector[slots[name]] = _knob_number(value)
    return vector


def hardware_vector(spec) -> np.ndarray:
    return np.asarray(
        [
            float(spec.is_gpu),
            math.log2(max(spec.cores, 1)),
            math.log2(max(spec.simd_width, 1)),
            math.log2(max(spec.cache_bytes[1], 1)) if spec.cache_bytes else 0.0,
            math.log10(max(spec.peak(), 1.0)),
            math.log10(max(spec.mem_bandwidth, 1.0)),
        ],
        dtype=np.float32,
    )


class FeatureExtractor:
    """Holds the MetaSchedule extractor: its first use is slow, later ones cheap (docs/decisions/one-time-costs.md)."""

    def __init__(self, spec, target):
        from tvm.s_tir import meta_schedule as ms

        self.spec = spec
        self.target = target
        self._ms = ms
        self._extractor = ms.feature_extractor.PerStoreFeature()

    def _context(self, mod):
        """A MetaSchedule TuneContext holding `mod` and the target, which is all the feature extractor reads.
        Made through its FFI constructor: TuneContext.__init__ first imports tvm.s_tir.tensor_intrin, which
        parses hundreds of TVMScript functions (10 s to minutes) and would be every `xcomp compile`'s cost
        (docs/decisions/one-time-costs.md); the features are the same either way."""
        from tvm.s_tir.meta_schedule import _ffi_api
        from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

        ms = self._ms
        ctx = ms.TuneContext.__new__(ms.TuneContext)
        ctx.__init_handle_by_constructor__(_ffi_api.TuneContext, mod, self.target, None, None, "main", 1, -1,
                                           get_logging_func(get_logger(__name__)))
        return ctx

    def program_vector(self, scheduled_func) -> np.ndarray:
        import tvm
        from tvm import s_tir

        ms = self._ms
        func = scheduled_func.with_attr("global_symbol", "main")
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        ctx = self._context(sch.mod)
        cand = ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(func))
        per_store = self._extractor.extract_from(ctx, [cand])[0].numpy()
        if per_store.size == 0:
            return np.zeros(2 * PER_STORE, np.float32)
        return np.concatenate([per_store.sum(axis=0), per_store.max(axis=0)]).astype(np.float32)

    def vector(self, scheduled_func, knobs: dict, kind: str) -> np.ndarray:
        kind_onehot = np.asarray([float(kind == k) for k in KINDS], dtype=np.float32)
        return np.concatenate(
            [self.program_vector(scheduled_func), knob_vector(knobs), kind_onehot, hardware_vector(self.spec)]
        )
