"""NVIDIA's warp-level tensor-core MMA for the shared matrix-core template: ldmatrix + mma.sync.m16n8k16.

TVM's tensor_intrin.cuda registers them: a 16 x 16 tile is two m16n8k16 instructions, operands come from dynamic
shared memory through ldmatrix, and each of the 32 lanes holds 8 values of each tile.
"""

from __future__ import annotations

from ..gpu import FragmentIntrinsics


def fragment_intrinsics(spec, in_dtype: str, acc_dtype: str) -> FragmentIntrinsics | None:
    has_mma_sync = any(m.name.startswith("mma.sync") and m.in_dtype == in_dtype and m.acc_dtype == acc_dtype
                       for m in spec.matrix_cores)
    if not has_mma_sync or (in_dtype, acc_dtype) != ("float16", "float32"):  # the pair TVM registers intrinsics for
        return None
    from tvm.s_tir.tensor_intrin import cuda as intrin

    layout = intrin.shared_16x16_to_ldmatrix_32x8_layout
    return FragmentIntrinsics(
        k=16, lanes=32, shared_scope="shared.dyn",
        load_a=intrin.LDMATRIX_f16_A_DYN_INTRIN, load_b=intrin.LDMATRIX_f16_B_DYN_INTRIN,
        compute=intrin.MMA_f16f16f32_INTRIN, fill=intrin.MMA_fill_16x16_f32_INTRIN,
        store=intrin.MMA_store_16x16_f32_shared_dyn_INTRIN_SIMPLE,
        layout_a=layout, layout_b=layout, layout_c=layout,
    )
