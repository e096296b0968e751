"""What the CUDA and ROCm backends share: choosing the arch, the TVM target made from the spec, source emission.

A vendor subclass supplies only its catalog, its TVM target kind and attributes, its runtime device, how to read
the visible GPU's arch, and how to write its device module's code.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from typing import Callable

from .base import Backend, HardwareSpec
from .tir_pipeline import derived_pipeline


@dataclasses.dataclass(frozen=True)
class FragmentIntrinsics:
    """A vendor's warp-level matrix-core MMA on 16 x 16 output tiles, as TVM tensor intrinsics.

    One warp (wavefront) holds each 16 x k operand tile and the 16 x 16 accumulator in registers, spread over its
    lanes by the `layout_*` maps ((row, col) of the tile -> (lane, register)). Operands come from `shared_scope`;
    B is read K-major ([k, n]). `bank_layouts`: shared memory has 32 banks of 4 bytes, which the template lays its
    tiles out against (tests/gpu_banks.py simulates them); False keeps plain padded rows (nothing models ROCm's LDS
    banks). The shared matrix-core template needs nothing else from the vendor.
    """

    k: int
    lanes: int
    shared_scope: str
    load_a: str
    load_b: str
    compute: str
    fill: str
    store: str
    layout_a: Callable
    layout_b: Callable
    layout_c: Callable
    bank_layouts: bool = False


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

    @abc.abstractmethod
    def fragment_intrinsics(self, in_dtype: str, acc_dtype: str) -> FragmentIntrinsics | None:
        """The matrix-core intrinsics for these operand/accumulator dtypes on this arch, or None."""

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

    def compile(self, mod, **kwargs):
        with self._pass_context():
            return super().compile(mod, tir_pipeline=_gpu_tir_pipeline(), **kwargs)

    def lower_device_kernels(self, func) -> list:
        """The device kernels of a scheduled PrimFunc as `compile` lowers them, up to code generation: the loops,
        addresses and intrinsic calls the CUDA or ROCm code is printed from (tests/gpu_banks.py reads them)."""
        import tvm
        from tvm.tirx import compilation_pipeline

        target = self.target()
        mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main").with_attr("target", target)})
        with target, self._pass_context():
            passes, _, _ = compilation_pipeline.PIPELINE_MAP[_gpu_tir_pipeline()]()
            lowered = passes(mod)
        return [f for f in lowered.functions.values() if int(f.attrs.get("calling_conv", 0)) == 2]  # kernel launch

    def _pass_context(self):
        import tvm

        current = tvm.transform.PassContext.current()
        # CSE would bind threadIdx.x into a variable inside warp-buffer indices, where LowerWarpMemory can no
        # longer find it ("require positive constant coefficient on warp index"); nvcc and LLVM do their own CSE.
        return tvm.transform.PassContext(
            opt_level=current.opt_level, required_pass=list(current.required_pass),
            disabled_pass=list(current.disabled_pass), instruments=list(current.instruments),
            config={**current.config, "tirx.disable_cse_tir": True, "tirx.use_async_copy": True},
        )

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


# TVM 0.27's LowerWarpMemory lowers only the first warp-scope buffer allocated in a statement sequence (later TVM
# continues through the rest); the matrix-core template allocates three (A, B and accumulator fragments), so the
# pass runs once per buffer. Each extra run finds nothing left to lower.
_WARP_BUFFERS_PER_KERNEL = 3


def _gpu_tir_pipeline() -> str:
    """The name of TVM's default TIR pipeline with every warp buffer lowered (registered on first use)."""
    from tvm import tirx

    return derived_pipeline("xcomp_gpu", device_passes=lambda: [
        tirx.transform.LowerWarpMemory() for _ in range(_WARP_BUFFERS_PER_KERNEL - 1)])
