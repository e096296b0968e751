"""The GPUs xcomp knows by architecture name, as `HardwareSpec`s both GPU backends and the templates read.

Numbers are the vendors' datasheet figures for dense math (no structured sparsity) at boost clock:
- sm_80:  NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column) and the "NVIDIA A100 Tensor Core GPU
          Architecture" whitepaper (SM count, shared memory, L2), CUDA C++ Programming Guide table
          "Technical Specifications per Compute Capability" (threads, registers, shared memory per block).
- sm_90:  NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column), "NVIDIA H100 Tensor Core GPU Architecture"
          whitepaper, same CUDA Programming Guide table; PTX ISA 8.x for the mma / wgmma shapes.
- gfx90a: AMD Instinct MI250X datasheet and the "AMD CDNA 2 Architecture" whitepaper; one GCD (graphics compute
          die) is one device to software, so every figure is the MI250X total divided by two.
- gfx942: AMD Instinct MI300X datasheet and the "AMD CDNA 3 Architecture" whitepaper; AMD "CDNA3 ISA" guide and
          the LLVM AMDGPU backend docs for the MFMA instruction shapes.

Conventions: `peak_flops["float32"]` is the plain (non-matrix-core) FP32 rate, because that is what scalar/vector
FMA code reaches; the float16/bfloat16/tfloat32 entries are matrix-core rates. `shared_mem_per_block` on NVIDIA is
the 48 KiB a block gets without opting in: TVM declares "shared" memory statically and never opts in, so dlight's
rules (the target's max_shared_memory_per_block) stay under it. "shared.dyn" memory is sized at launch, and TVM's
CUDA runtime opts a kernel in when it takes more than 48 KiB: `shared_mem_opt_in` is the CUDA guide's per-block
maximum then (sharedMemPerBlockOptin: 163 KiB on sm_80, 227 KiB on sm_90), which the matrix-core template's
dynamic tiles may fill.
"""

from __future__ import annotations

from .base import HardwareSpec, MatrixCoreShape

KIB, MIB, TERA = 1024, 1024 * 1024, 1e12

_MMA_SYNC = (  # warp-level mma.sync, sm_80 and later
    MatrixCoreShape("mma.sync.m16n8k16", 16, 8, 16, "float16", "float32"),
    MatrixCoreShape("mma.sync.m16n8k16", 16, 8, 16, "bfloat16", "float32"),
    MatrixCoreShape("mma.sync.m16n8k8", 16, 8, 8, "tfloat32", "float32"),
)
_WGMMA = (  # warpgroup-level wgmma, sm_90 only; N may be any multiple of 8 up to 256, the widest is listed
    MatrixCoreShape("wgmma.m64n256k16", 64, 256, 16, "float16", "float32"),
    MatrixCoreShape("wgmma.m64n256k16", 64, 256, 16, "bfloat16", "float32"),
    MatrixCoreShape("wgmma.m64n256k8", 64, 256, 8, "tfloat32", "float32"),
)

CUDA_SPECS = {
    "sm_80": HardwareSpec(
        name="NVIDIA A100 SXM4 80GB",
        kind="gpu",
        arch="sm_80",
        cores=108,
        simd_width=32,
        vector_bytes=16,
        max_threads_per_block=1024,
        shared_mem_per_block=48 * KIB,
        shared_mem_opt_in=163 * KIB,
        registers_per_block=65536,
        cache_bytes=(192 * KIB, 40 * MIB, 0),  # L1 + shared per SM, L2
        matrix_cores=_MMA_SYNC,
        peak_flops={"float32": 19.5 * TERA, "tfloat32": 156 * TERA, "float16": 312 * TERA, "bfloat16": 312 * TERA},
        mem_bandwidth=2039e9,
        features=("tensor_core", "bf16", "tf32", "cp.async"),
        triple="nvptx64-nvidia-cuda",
    ),
    "sm_90": HardwareSpec(
        name="NVIDIA H100 SXM5 80GB",
        kind="gpu",
        arch="sm_90",
        cores=132,
        simd_width=32,
        vector_bytes=16,
        max_threads_per_block=1024,
        shared_mem_per_block=48 * KIB,
        shared_mem_opt_in=227 * KIB,
        registers_per_block=65536,
        cache_bytes=(256 * KIB, 50 * MIB, 0),
        matrix_cores=_MMA_SYNC + _WGMMA,
        peak_flops={"float32": 67 * TERA, "tfloat32": 494.7 * TERA, "float16": 989.4 * TERA,
                    "bfloat16": 989.4 * TERA},
        mem_bandwidth=3.35e12,
        features=("tensor_core", "bf16", "tf32", "cp.async", "wgmma", "tma", "fp8"),
        triple="nvptx64-nvidia-cuda",
    ),
}


def _mfma(name, m, n, k, in_dtype):
    return MatrixCoreShape(name, m, n, k, in_dtype, "float32")


ROCM_SPECS = {
    "gfx90a": HardwareSpec(
        name="AMD Instinct MI250X (one GCD)",
        kind="gpu",
        arch="gfx90a",
        cores=110,
        simd_width=64,
        vector_bytes=16,
        max_threads_per_block=1024,
        shared_mem_per_block=64 * KIB,  # LDS per workgroup
        registers_per_block=4 * 512 * 64,  # 4 SIMDs x 512 VGPRs (incl. AGPRs) x 64 lanes, all usable by one workgroup
        cache_bytes=(16 * KIB, 8 * MIB, 0),
        matrix_cores=(
            _mfma("v_mfma_f32_32x32x8f16", 32, 32, 8, "float16"),
            _mfma("v_mfma_f32_16x16x16f16", 16, 16, 16, "float16"),
            _mfma("v_mfma_f32_32x32x8bf16_1k", 32, 32, 8, "bfloat16"),
            _mfma("v_mfma_f32_16x16x16bf16_1k", 16, 16, 16, "bfloat16"),
            _mfma("v_mfma_f32_16x16x4f32", 16, 16, 4, "float32"),
        ),
        # MI250X: 47.9 TF fp32 vector, 383 TF fp16/bf16 matrix, 3.2768 TB/s, for two GCDs
        peak_flops={"float32": 23.95 * TERA, "float16": 191.5 * TERA, "bfloat16": 191.5 * TERA},
        mem_bandwidth=1.6384e12,
        features=("mfma", "bf16", "packed_fp32"),
        triple="amdgcn-amd-amdhsa",
    ),
    "gfx942": HardwareSpec(
        name="AMD Instinct MI300X",
        kind="gpu",
        arch="gfx942",
        cores=304,
        simd_width=64,
        vector_bytes=16,
        max_threads_per_block=1024,
        shared_mem_per_block=64 * KIB,
        registers_per_block=4 * 512 * 64,
        cache_bytes=(32 * KIB, 4 * MIB, 256 * MIB),  # L1 per CU, L2 per XCD, Infinity Cache
        matrix_cores=(
            _mfma("v_mfma_f32_32x32x8_f16", 32, 32, 8, "float16"),
            _mfma("v_mfma_f32_16x16x16_f16", 16, 16, 16, "float16"),
            _mfma("v_mfma_f32_32x32x8_bf16", 32, 32, 8, "bfloat16"),
            _mfma("v_mfma_f32_16x16x16_bf16", 16, 16, 16, "bfloat16"),
            _mfma("v_mfma_f32_16x16x8_xf32", 16, 16, 8, "tfloat32"),
            _mfma("v_mfma_f32_16x16x4_f32", 16, 16, 4, "float32"),
        ),
        peak_flops={"float32": 81.7 * TERA, "tfloat32": 653.7 * TERA, "float16": 1307.4 * TERA,
                    "bfloat16": 1307.4 * TERA},
        mem_bandwidth=5.3e12,
        features=("mfma", "bf16", "xf32", "fp8"),
        triple="amdgcn-amd-amdhsa",
    ),
}
