"""Backends: one per vendor, behind the vendor-neutral `Backend` / `HardwareSpec` layer in base.py.

Target strings users type: `cpu`, `cpu:skylake-avx512`, `cpu:aarch64-linux-gnu`, `cuda`, `cuda:sm_90`,
`rocm:gfx942`.
"""

from __future__ import annotations

from .base import Backend, HardwareSpec, MatrixCoreShape
from .tvm_compat import prepare

KNOWN_KINDS = ("cpu", "cuda", "rocm")


def get_backend(target: str) -> Backend:
    """Parse a user target string into a Backend; a TargetError names what was wrong."""
    from xcomp.errors import TargetError

    prepare()  # TVM's process-wide settings, before any backend builds or runs anything
    if not isinstance(target, str) or not target.strip():
        raise TargetError(f"target must be a string such as 'cpu' or 'cuda:sm_90', got {target!r}")
    kind, _, arch = target.strip().partition(":")
    kind = kind.lower()
    if kind in ("llvm", "x86", "host"):
        kind = "cpu"
    if kind == "cpu":
        from .cpu import CPUBackend

        return CPUBackend.from_arch(arch or None)
    if kind in ("cuda", "rocm"):
        import importlib

        module = importlib.import_module(f"{__name__}.{kind}")
        return module.make_backend(arch or None)
    raise TargetError(
        f"unknown target {target!r}: expected one of {', '.join(KNOWN_KINDS)} "
        "(optionally with an arch, e.g. cpu:skylake-avx512, cuda:sm_90, rocm:gfx942)"
    )


def backend_for_spec(spec: HardwareSpec) -> Backend:
    """A backend for a spec alone (e.g. to get its TVM target while partitioning or predicting)."""
    prepare()
    if spec.is_gpu:
        from xcomp.errors import TargetError

        from .cuda import CUDABackend
        from .rocm import ROCmBackend

        for cls in (CUDABackend, ROCmBackend):
            if spec.arch in cls.specs:
                return cls(spec)
        raise TargetError(f"no GPU backend knows the architecture {spec.arch!r}")
    from .cpu import CPUBackend
    from .cpu.detect import host_cpu

    return CPUBackend(spec, is_host=spec == host_cpu())


__all__ = ["Backend", "HardwareSpec", "MatrixCoreShape", "get_backend", "backend_for_spec", "KNOWN_KINDS"]
