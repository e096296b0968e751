"""The vendor-neutral layer: a hardware description that templates read, and the Backend interface.

Templates and the cost model look at a `HardwareSpec` (widths, sizes, peaks), never at a vendor name; each
backend folder holds only what is truly vendor specific (how to make a TVM target, build, load, time).
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class MatrixCoreShape:
    """One matrix-core instruction: m x n x k on `in_dtype` inputs accumulating in `acc_dtype`."""

    name: str  # e.g. "mma.m16n8k16", "v_mfma_f32_32x32x8f16", "vnni.vpdpbusd"
    m: int
    n: int
    k: int
    in_dtype: str
    acc_dtype: str


# HardwareSpec fields that the arch and features determine: the same hardware gets the same fingerprint (and
# finds its tuning records) whether or not a spec spells them out.
_DERIVED_FROM_ARCH = ("fma_pipes", "load_ports", "fma_latency", "shared_mem_opt_in", "l1_ways")


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    """What a template or the cost model may know about a device.

    kind:            "cpu" or "gpu".
    arch:            the TVM mcpu/arch string ("znver4", "sm_90", "gfx942"); used to build, not to decide.
    cores:           CPU cores, or SMs / CUs on a GPU.
    simd_width:      vector lanes of fp32 on a CPU (8 for AVX2, 16 for AVX-512); warp / wavefront size on a GPU.
    vector_bytes:    bytes per vector register (CPU) or per widest global load (GPU).
    vector_registers: architectural vector registers per core (CPU: 16 with AVX2, 32 with AVX-512 / NEON); 0 on a GPU.
    max_threads_per_block, shared_mem_per_block, registers_per_block: GPU launch limits (0 on a CPU).
    shared_mem_opt_in: dynamic shared memory a block may take once its kernel opts in, beyond
                     shared_mem_per_block (NVIDIA: 163 KiB on sm_80, 227 KiB on sm_90; TVM's CUDA runtime opts a
                     kernel in when its dynamic shared memory exceeds 48 KiB); 0: no more than shared_mem_per_block.
                     It follows from the arch, so the fingerprint leaves it out.
    cache_bytes:     (L1d, L2, L3) per core/SM, bytes; 0 where unknown.
    l1_ways:         the L1d's associativity (CPU; 0 where unknown): rows of a matrix whose stride is a multiple of
                     cache_bytes[0] / l1_ways share one set. It follows from the arch, so the fingerprint leaves it
                     out.
    matrix_cores:    matrix-core instruction shapes available.
    peak_flops:      dtype -> FLOP/s for the whole device.
    mem_bandwidth:   bytes/s from main memory / HBM.
    features:        ISA features that change code generation ("avx2", "fma", "avx512f", ...).
    fma_pipes, load_ports, fma_latency: a CPU core's inner-loop limits: vector FMAs issued per cycle, vector loads
                     per cycle, cycles from an FMA's issue to its result (0 on a GPU). Register tiles are sized
                     from them. They follow from the arch, so the fingerprint leaves them out.
    """

    name: str
    kind: str
    arch: str
    cores: int
    simd_width: int
    vector_bytes: int
    vector_registers: int = 0
    max_threads_per_block: int = 0
    shared_mem_per_block: int = 0
    registers_per_block: int = 0
    shared_mem_opt_in: int = 0
    cache_bytes: tuple = (0, 0, 0)
    l1_ways: int = 0
    matrix_cores: tuple = ()
    peak_flops: dict = dataclasses.field(default_factory=dict)
    mem_bandwidth: float = 0.0
    features: tuple = ()
    triple: str = ""
    fma_pipes: int = 0
    load_ports: int = 0
    fma_latency: int = 0

    @property
    def dynamic_shared_mem(self) -> int:
        """Bytes of dynamic shared memory one block may take (shared_mem_opt_in where the arch has it)."""
        return max(self.shared_mem_opt_in, self.shared_mem_per_block)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["matrix_cores"] = [dataclasses.asdict(m) for m in self.matrix_cores]
        d["cache_bytes"] = list(self.cache_bytes)
        d["features"] = list(self.features)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HardwareSpec":
        d = dict(d)
        d["matrix_cores"] = tuple(MatrixCoreShape(**m) for m in d.get("matrix_cores", ()))
        d["cache_bytes"] = tuple(d.get("cache_bytes", (0, 0, 0)))
        d["features"] = tuple(d.get("features", ()))
        return cls(**d)

    def fingerprint(self) -> str:
        """A short stable id of everything that makes measurements on this hardware comparable."""
        identity = {k: v for k, v in self.to_dict().items() if k not in _DERIVED_FROM_ARCH}
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def peak(self, dtype: str = "float32") -> float:
        return float(self.peak_flops.get(dtype, 0.0))


class Backend(abc.ABC):
    """How one vendor's code is made and run. Everything else is shared."""

    #: target prefix the user types: "cpu", "cuda", "rocm"
    name: str = ""

    def __init__(self, spec: HardwareSpec):
        self.spec = spec
        #: float32 matmuls and convs may use TF32 matrix cores (the user opts in: `xcomp compile --tf32`)
        self.tf32 = False
        self._schedule_context = None

    @abc.abstractmethod
    def target(self):
        """The tvm.target.Target to compile for (a dict target; strings are gone in TVM 0.27)."""

    def fragment_intrinsics(self, in_dtype: str, acc_dtype: str):  # noqa: ARG002 - GPU backends override
        """The matrix-core intrinsics for these operand/accumulator dtypes, or None (none here)."""
        return None

    def schedule_context(self):
        """What schedule templates know of this backend (schedules/context.py), made once."""
        from xcomp.schedules.context import ScheduleContext

        ctx = self._schedule_context
        if ctx is None or ctx.spec is not self.spec or ctx.tf32 != self.tf32:
            self._schedule_context = ScheduleContext(self.spec, self.target(), self.fragment_intrinsics, self.tf32)
        return self._schedule_context

    @abc.abstractmethod
    def available(self) -> bool:
        """True when a device of this kind is present here, so built code can run and be timed."""

    @abc.abstractmethod
    def device(self):
        """The tvm runtime device to run on (only meaningful when available())."""

    def compile(self, mod, **kwargs):
        """tvm.compile `mod` (an IRModule or PrimFunc) for this backend's target; kwargs go to tvm.compile."""
        import tvm

        target = self.target()
        with target:
            return tvm.compile(mod, target=target, **kwargs)

    def can_run(self) -> bool:
        """Built code can run on this machine (the device is present and the code is for it)."""
        return self.available()

    def measured_roofs(self) -> dict | None:
        """The fp32 FLOP/s and memory bandwidth this device sustains, measured here with small kernels
        ({"source": "measured", "peak_flops": {"float32": ...}, "mem_bandwidth": ..., "method": ...}), or None
        where this backend has no such measurement (reports then use the spec's nominal figures)."""
        return None

    def toolchain_problem(self) -> str | None:
        """Why code for this target cannot be built on this machine (a missing linker, ...), or None."""
        return None

    def can_link_here(self) -> bool:
        """The host side of the built code can be linked into a shared library on this machine."""
        return True

    def emit_sources(self, executable, out_dir: str) -> list:
        """Write the generated code of a compiled executable into out_dir; returns the paths written.

        Host code (LLVM) is written here as LLVM IR and assembly; device modules (CUDA, ROCm) go through
        `emit_device_module`, which GPU backends implement.
        """
        import os

        os.makedirs(out_dir, exist_ok=True)
        root = executable.mod if hasattr(executable, "mod") else executable
        written = []
        stack = list(root.imports)  # the root is the VM executable itself: only its imports hold code
        while stack:  # imports form a tree
            module = stack.pop()
            stack.extend(module.imports)
            if module.kind == "llvm":
                for fmt, ext in (("ll", "ll"), ("asm", "s")):
                    path = os.path.join(out_dir, f"host.{ext}")
                    with open(path, "w") as f:
                        f.write(module.inspect_source(fmt))
                    written.append(path)
            else:
                written += self.emit_device_module(module, out_dir)
        return written

    def emit_device_module(self, module, out_dir: str) -> list:  # noqa: ARG002 - overridden by GPU backends
        """Write one non-host runtime module (e.g. kind "cuda"); the CPU backend has none."""
        return []

    @property
    def target_string(self) -> str:
        return f"{self.name}:{self.spec.arch}" if self.spec.arch else self.name
