"""What the CUDA and ROCm backends share: choosing the arch, the TVM target made from the spec, source emission.

A vendor subclass supplies only its catalog, its TVM target kind and attributes, its runtime device, how to read
the visible GPU's arch, and how to write its device module's code.
"""

from __future__ import annotations

import abc
import os

from .base import Backend, HardwareSpec


class GPUBackend(Backend):
    #: arch name -> HardwareSpec, from backends/catalog.py
    specs: dict = {}
    #: an arch to suggest in error messages
    example_arch: str = ""
    #: what a person calls this vendor's GPUs in a message
    vendor: str = ""
    #: `kind` of the runtime module TVM builds for this vendor's kernels
    device_module_kind: str = ""

    @classmethod
    def from_arch(cls, arch: str | None) -> "GPUBackend":
        """arch None means the GPU visible here; otherwise a name from the catalog (cross-compiling is fine)."""
        from xcomp.errors import TargetError

        if not arch:
            if not cls.gpu_visible():
                raise TargetError(
                    f"target {cls.name!r}: no {cls.vendor} GPU is visible on this machine, so the architecture cannot "
                    f"be detected; name one to cross-compile for, e.g. {cls.name}:{cls.example_arch}"
                )
            arch = cls.visible_arch()
        arch = arch.strip().lower()
        if arch not in cls.specs:
            known = ", ".join(f"{cls.name}:{a}" for a in cls.specs)
            raise TargetError(f"unknown {cls.vendor} architecture {arch!r}; known: {known}")
        return cls(cls.specs[arch])

    # -- vendor specifics --------------------------------------------------------------------------------------

    @classmethod
    @abc.abstractmethod
    def runtime_device(cls):
        """tvm.cuda(0) / tvm.rocm(0)."""

    @classmethod
    @abc.abstractmethod
    def visible_arch(cls) -> str:
        """The arch name of the visible GPU (only called when one is visible)."""

    @abc.abstractmethod
    def vendor_target_attrs(self) -> dict:
        """The TVM target's kind and arch attributes, e.g. {"kind": "cuda", "arch": "sm_90"}."""

    @abc.abstractmethod
    def write_device_code(self, module, stem: str) -> list:
        """Write the code of one device module next to `stem` (a path without extension); returns paths."""

    # -- shared ------------------------------------------------------------------------------------------------

    @classmethod
    def gpu_visible(cls) -> bool:
        return bool(cls.runtime_device().exist)

    def target(self):
        import tvm

        spec: HardwareSpec = self.spec
        # Launch limits come from the spec, so dlight rules and TVM's checks see the same numbers as our templates.
        attrs = dict(
            self.vendor_target_attrs(),
            max_num_threads=spec.max_threads_per_block,
            max_threads_per_block=spec.max_threads_per_block,
            thread_warp_size=spec.simd_width,
            max_shared_memory_per_block=spec.shared_mem_per_block,
        )
        return tvm.target.Target(attrs, host={"kind": "llvm"})

    def device(self):
        return self.runtime_device()

    def available(self) -> bool:
        return self.gpu_visible()

    def can_run(self) -> bool:
        """Code runs only on the arch it was built for (ROCm code objects and CUDA cubins are arch-specific)."""
        return self.available() and self.visible_arch() == self.spec.arch

    def emit_device_module(self, module, out_dir: str) -> list:
        if module.kind != self.device_module_kind:  # e.g. the relax.VMExecutable at the root
            return []
        # tvm.compile puts every kernel of a target into one device module, so one fixed name suffices.
        return self.write_device_code(module, os.path.join(out_dir, f"{self.name}_kernels"))


def backend_for_spec(spec: HardwareSpec) -> GPUBackend:
    """The GPU backend whose catalog holds spec.arch, so schedules can get a TVM target from a spec alone."""
    from xcomp.errors import TargetError

    from .cuda import CUDABackend
    from .rocm import ROCmBackend

    for cls in (CUDABackend, ROCmBackend):
        if spec.arch in cls.specs:
            return cls(spec)
    raise TargetError(f"no GPU backend knows the architecture {spec.arch!r}")
