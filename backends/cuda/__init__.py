"""CUDA backend: CUDA C from TVM, PTX from nvcc, for the NVIDIA archs in backends/catalog.py.

What TVM 0.27 does with CUDA: without libcuda (a GPU-less machine) `tvm.compile` keeps the CUDA C source in the
module (format "cuda") and never calls `tvm_callback_cuda_compile`; the module compiles it when loaded on a GPU
machine (NVRTC through the cuda-bindings package, or nvcc with TVM_CUDA_COMPILE_MODE=nvcc). On a machine with a
GPU it compiles to cubin at build time. `compile_source` runs nvcc ahead of time for source emission.
"""

from __future__ import annotations

from ..catalog import CUDA_SPECS
from ..gpu import GPUBackend
from . import tensor_core
from .nvcc import compile_source


class CUDABackend(GPUBackend):
    name = "cuda"
    vendor = "NVIDIA"
    specs = CUDA_SPECS
    device_module_kind = "cuda"
    example_arch = "sm_90"

    @classmethod
    def runtime_device(cls):
        import tvm

        return tvm.cuda(0)

    @classmethod
    def visible_arch(cls) -> str:
        return "sm_" + cls.runtime_device().compute_version.replace(".", "")

    def vendor_target_attrs(self) -> dict:
        return {"kind": "cuda", "arch": self.spec.arch}

    def write_device_code(self, module, stem: str) -> list:
        source = module.inspect_source("cuda")
        ptx = compile_source(source, self.target(), "ptx")
        written = []
        for ext, text in (("cu", source), ("ptx", ptx.decode())):
            with open(f"{stem}.{ext}", "w") as f:
                f.write(text)
            written.append(f"{stem}.{ext}")
        return written

    def fragment_intrinsics(self, in_dtype: str, acc_dtype: str):
        return tensor_core.fragment_intrinsics(self.spec, in_dtype, acc_dtype)


def make_backend(arch: str | None) -> CUDABackend:
    return CUDABackend.from_arch(arch)
