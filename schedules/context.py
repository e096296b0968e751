"""What a schedule template knows of the machine it schedules for, handed to it by the backend.

The backend builds it (`Backend.schedule_context()`): the hardware description, the TVM target, and the
matrix-core intrinsics the backend registers. Templates read these and never look a backend up, so a new backend
needs no change in schedules/.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class ScheduleContext:
    spec: Any  # backends.base.HardwareSpec
    target: Any  # tvm.target.Target
    # (operand dtype, accumulator dtype) -> the backend's fragment intrinsics for its matrix cores, or None
    fragment_intrinsics: Callable
    # float32 GEMMs may run on the matrix cores' tfloat32 shapes (operands rounded to tf32, float32 sums): the
    # user's opt-in (--tf32), since it changes results; off, they keep plain float32 math
    tf32: bool = False
