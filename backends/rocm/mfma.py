"""AMD's wavefront-level matrix-core MMA for the shared matrix-core template: v_mfma_f32_16x16x16_f16.

TVM's tensor_intrin.rocm registers the loads, the MFMA and the fill; each of the 64 lanes holds 4 values of each
16 x 16 tile. TVM registers the accumulator store only towards global memory, so the store into shared memory
(where the template runs a fused epilogue) is registered here from TVM's own generator.
"""

from __future__ import annotations

from ..gpu import FragmentIntrinsics
from ..tvm_compat import tensor_intrinsics

_STORE_TO_SHARED = "xcomp_rocm_mfma_store_16x16_f32_shared"


def fragment_intrinsics(spec, in_dtype: str, acc_dtype: str) -> FragmentIntrinsics | None:
    has_mfma = any(m.name.startswith("v_mfma") and (m.m, m.n, m.k) == (16, 16, 16) and m.in_dtype == in_dtype
                   and m.acc_dtype == acc_dtype for m in spec.matrix_cores)
    if not has_mfma or (in_dtype, acc_dtype) != ("float16", "float32"):  # the pair TVM registers intrinsics for
        return None
    from tvm.s_tir import TensorIntrin
    intrin = tensor_intrinsics().rocm

    try:
        TensorIntrin.get(_STORE_TO_SHARED)
    except Exception:  # noqa: BLE001 - TVM raises a plain error for an unknown name
        TensorIntrin.register(_STORE_TO_SHARED, *intrin.get_mfma_store_intrin(4, "float32", "shared"))
    return FragmentIntrinsics(
        k=16, lanes=64, shared_scope="shared",
        load_a=intrin.ROCM_MFMA_LOAD_16x16_A_SHARED_f16_INTRIN, load_b=intrin.ROCM_MFMA_LOAD_16x16_B_SHARED_f16_INTRIN,
        compute=intrin.ROCM_MFMA_f16f16f32_INTRIN, fill=intrin.ROCM_MFMA_fill_16x16_f32_INTRIN, store=_STORE_TO_SHARED,
        layout_a=intrin.shared_16x16_to_local_64x4_layout_A, layout_b=intrin.shared_16x16_to_local_64x4_layout_B,
        layout_c=intrin.shared_16x16_to_local_64x4_layout_C,
    )
