"""ROCm backend: LLVM AMDGPU code objects for the AMD archs in backends/catalog.py, built without a ROCm install.

Two TVM callbacks (toolchain.py, registered by tvm_compat.prepare) link with LLVM 22's ld.lld and link no device
bitcode libraries when ROCm is not installed.
"""

from __future__ import annotations

from ..catalog import ROCM_SPECS
from ..gpu import GPUBackend
from . import mfma, toolchain
from .code_object import extract_code_object


class ROCmBackend(GPUBackend):
    name = "rocm"
    vendor = "AMD"
    specs = ROCM_SPECS
    device_module_kind = "hip"
    example_arch = "gfx942"

    @classmethod
    def runtime_device(cls):
        import tvm

        return tvm.rocm(0)

    @classmethod
    def visible_arch(cls) -> str:
        from tvm.support.rocm import get_rocm_arch

        return get_rocm_arch()

    def vendor_target_attrs(self) -> dict:
        return {"kind": "rocm", "mcpu": self.spec.arch}

    def toolchain_problem(self) -> str | None:
        """Why code cannot be built here (the linker is missing), or None."""
        return toolchain.linker_problem()

    def write_device_code(self, module, stem: str) -> list:
        with open(f"{stem}.s", "w") as f:
            f.write(module.inspect_source("asm"))
        with open(f"{stem}.hsaco", "wb") as f:
            f.write(extract_code_object(module))
        return [f"{stem}.s", f"{stem}.hsaco"]

    def fragment_intrinsics(self, in_dtype: str, acc_dtype: str):
        return mfma.fragment_intrinsics(self.spec, in_dtype, acc_dtype)


def make_backend(arch: str | None) -> ROCmBackend:
    return ROCmBackend.from_arch(arch)
