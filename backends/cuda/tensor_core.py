"""NVIDIA's warp-level tensor-core MMA for the shared matrix-core template.

float16: TVM's tensor_intrin.cuda registers them: ldmatrix + mma.sync.m16n8k16; a 16 x 16 tile is two m16n8k16
instructions, operands come from dynamic shared memory through ldmatrix, and each of the 32 lanes holds 8 values
of each tile.

bfloat16: the same instructions on another 16-bit type (ldmatrix moves 16-bit elements whatever they hold;
mma.sync.m16n8k16 takes .bf16 operands), but TVM registers them for float16 only, so they are registered here.
Each ldmatrix call carries its element type: TVM's CUDA code generation takes a transposing ldmatrix of 8-bit
elements apart into a gather loop, so a call re-parsed from TVMScript (which prints no type for it) loses B's
transpose.

tfloat32 (float32 models with --tf32): TVM's PTX code generation prints mma.sync.m16n8k8 on tf32 operands, but
registers no tensor intrinsics for it, so they are registered here. ldmatrix moves 16-bit elements (its transpose
would split a float32 in two), so each lane loads its fragment elements one by one, rounding each to tf32 on the
way (round to nearest, ties away from zero, as cvt.rna.tf32.f32: the mma itself would truncate the low 13 bits).
"""

from __future__ import annotations

from ..gpu import FragmentIntrinsics
from ..tvm_compat import tensor_intrinsics

_LANES = 32
_TILE = 16  # rows and columns of one output fragment


def _mma_sync_shape(spec, in_dtype: str, acc_dtype: str):
    return next((m for m in spec.matrix_cores if m.name.startswith("mma.sync") and m.in_dtype == in_dtype
                 and m.acc_dtype == acc_dtype), None)


def fragment_intrinsics(spec, in_dtype: str, acc_dtype: str) -> FragmentIntrinsics | None:
    shape = _mma_sync_shape(spec, in_dtype, acc_dtype)
    if shape is None:
        return None
    if (in_dtype, acc_dtype) == ("tfloat32", "float32") and (shape.m, shape.n, shape.k) == (16, 8, 8):
        return _tf32_intrinsics(shape)
    if acc_dtype != "float32" or in_dtype not in ("float16", "bfloat16"):
        return None
    intrin = tensor_intrinsics().cuda

    layout = intrin.shared_16x16_to_ldmatrix_32x8_layout
    if in_dtype == "float16":
        names = {"load_a": intrin.LDMATRIX_f16_A_DYN_INTRIN, "load_b": intrin.LDMATRIX_f16_B_DYN_INTRIN,
                 "compute": intrin.MMA_f16f16f32_INTRIN}
    else:
        names = _registered(_BF16_NAMES, lambda: {
            "load_a": _ldmatrix(layout, "bfloat16", transpose=False),
            "load_b": _ldmatrix(layout, "bfloat16", transpose=True),  # B's rows are K: mma wants it column-major
            "compute": _mma_pair(shape, "bfloat16", "bf16", layout, layout, layout)})
    return FragmentIntrinsics(
        k=16, lanes=_LANES, shared_scope="shared.dyn", **names, fill=intrin.MMA_fill_16x16_f32_INTRIN,
        store=intrin.MMA_store_16x16_f32_shared_dyn_INTRIN_SIMPLE,
        layout_a=layout, layout_b=layout, layout_c=layout, bank_layouts=True,
    )


def _registered(names: dict, build) -> dict:
    """`names` ({role: intrinsic name}), registering build()'s {role: (desc, impl)} under them on first use."""
    from tvm.s_tir import TensorIntrin

    try:
        TensorIntrin.get(names["compute"])
    except Exception:  # noqa: BLE001 - TVM raises a plain error for an unknown name: not registered yet
        for role, funcs in build().items():
            TensorIntrin.register(names[role], *funcs)
    return names


_BF16_NAMES = {"load_a": "xcomp_mma_ldmatrix_bf16_a_shared_dyn", "load_b": "xcomp_mma_ldmatrix_bf16_b_shared_dyn",
               "compute": "xcomp_mma_bf16bf16f32"}


def _ldmatrix(layout, dtype: str, transpose: bool):
    """A 16 x 16 tile of 16-bit elements, shared -> one warp's registers by one ldmatrix.x4: lane l gives the
    address of row l % 16, columns 8 (l // 16) on; `transpose` hands each lane the tile's columns instead."""
    from tvm.script import tirx as T

    local = _TILE * _TILE // _LANES

    @T.prim_func(s_tir=True)
    def load_impl(warp_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (_TILE, _TILE), dtype, scope="shared.dyn", offset_factor=_TILE,
                                strides=[s0, s1])
        warp = T.match_buffer(warp_handle, (_LANES, local), dtype, scope="warp", offset_factor=_TILE)
        with T.sblock("root"):
            T.reads(shared[0:_TILE, 0:_TILE])
            T.writes(warp[0:_LANES, 0:local])
            for tx in T.thread_binding(0, _LANES, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    transpose, 4, ".b16", warp.data, warp.elem_offset + local * tx, shared.access_ptr("r"),
                    s0 * (tx % _TILE) + 8 * (tx // _TILE), dtype=dtype))

    return _fragment_load_desc(_TILE, _TILE, dtype, layout, offset_factor=_TILE), load_impl


def _fragment_load_desc(rows: int, cols: int, dtype: str, layout, offset_factor: int = 0):
    """What loading a rows x cols operand tile from shared memory into one warp's registers computes: element
    (r, c) goes to (lane, register) layout(r, c)."""
    from tvm.script import tirx as T

    local = rows * cols // _LANES

    @T.prim_func(s_tir=True)
    def load_desc(warp_handle: T.handle, shared_handle: T.handle) -> None:
        shared = T.match_buffer(shared_handle, (rows, cols), dtype, scope="shared.dyn", offset_factor=offset_factor)
        warp = T.match_buffer(warp_handle, (_LANES, local), dtype, scope="warp", offset_factor=offset_factor)
        with T.sblock("root"):
            T.reads(shared[0:rows, 0:cols])
            T.writes(warp[0:_LANES, 0:local])
            for ax0, ax1 in T.grid(rows, cols):
                with T.sblock("shared_warp"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    lane, index = T.meta_var(layout(v0, v1))
                    T.reads(shared[v0, v1])
                    T.writes(warp[lane, index])
                    warp[lane, index] = shared[v0, v1]

    return load_desc


# mma.sync.m16n8k8 tf32 operand layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), lane = 4 * group +
# thread-in-group. A (16 x 8): a0 (group, t), a1 (group + 8, t), a2 (group, t + 4), a3 (group + 8, t + 4).
# B (8 x 16, two n8 halves): b0 (k = t, n = group), b1 (k = t + 4, n = group); the second half in registers 2, 3.
def tf32_layout_a(i, j):
    return 4 * (i % 8) + j % 4, i // 8 + 2 * (j // 4)


def tf32_layout_b(k, n):
    return 4 * (n % 8) + k % 4, k // 4 + 2 * (n // 8)


def _tf32_a_element(lane, local):
    return lane // 4 + 8 * (local % 2), lane % 4 + 4 * (local // 2)


def _tf32_b_element(lane, local):
    return lane % 4 + 4 * (local % 2), lane // 4 + 8 * (local // 2)


_TF32_NAMES = {"load_a": "xcomp_mma_load_tf32_a_shared_dyn", "load_b": "xcomp_mma_load_tf32_b_shared_dyn",
               "compute": "xcomp_mma_tf32tf32f32"}


def _tf32_intrinsics(shape) -> FragmentIntrinsics:
    intrin = tensor_intrinsics().cuda

    k = shape.k
    names = _registered(_TF32_NAMES, lambda: {
        "load_a": _tf32_load(_TILE, k, tf32_layout_a, _tf32_a_element),
        "load_b": _tf32_load(k, _TILE, tf32_layout_b, _tf32_b_element),
        "compute": _mma_pair(shape, "float32", "tf32", tf32_layout_a, tf32_layout_b,
                             intrin.shared_16x16_to_ldmatrix_32x8_layout)})
    return FragmentIntrinsics(
        k=k, lanes=_LANES, shared_scope="shared.dyn", **names,
        # the accumulator's layout is mma.m16n8k16's, so TVM's float32 fill and store serve as they are
        fill=intrin.MMA_fill_16x16_f32_INTRIN, store=intrin.MMA_store_16x16_f32_shared_dyn_INTRIN_SIMPLE,
        layout_a=tf32_layout_a, layout_b=tf32_layout_b, layout_c=intrin.shared_16x16_to_ldmatrix_32x8_layout,
        bank_layouts=True,
    )


def _round_to_tf32(value):
    """float32 -> the nearest tf32 (ties away from zero), still as a float32: cvt.rna.tf32.f32 on the bits."""
    from tvm.script import tirx as T

    bits = T.reinterpret("uint32", value)
    return T.reinterpret("float32", (bits + T.uint32(0x1000)) & T.uint32(0xFFFFE000))


def _tf32_load(rows, cols, layout, element):
    """A rows x cols float32 operand tile, shared -> one warp's registers, each element rounded to tf32."""
    from tvm.script import tirx as T

    local = rows * cols // _LANES

    @T.prim_func(s_tir=True)
    def load_impl(warp_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (rows, cols), "float32", scope="shared.dyn", offset_factor=1,
                                strides=[s0, s1])
        warp = T.match_buffer(warp_handle, (_LANES, local), "float32", scope="warp", offset_factor=1)
        with T.sblock("root"):
            T.reads(shared[0:rows, 0:cols])
            T.writes(warp[0:_LANES, 0:local])
            for tx in T.thread_binding(0, _LANES, "threadIdx.x"):
                for index in T.unroll(local):
                    row, col = T.meta_var(element(tx, index))
                    warp[tx, index] = _round_to_tf32(shared[row, col])

    return _fragment_load_desc(rows, cols, "float32", layout), load_impl


def _mma_pair(shape, dtype: str, ptx_type: str, layout_a, layout_b, layout_c):
    """One 16 x 16 x k fragment product summed in float32: two mma.sync m16n8k on the two n8 halves of B and C, on
    operands of `dtype` (PTX's `ptx_type`), widened to float32 as the template's block widens them."""
    from tvm.script import tirx as T

    k, local_ab, local_c = shape.k, _TILE * shape.k // _LANES, _TILE * _TILE // _LANES
    ptx_shape = f"m{shape.m}n{shape.n}k{shape.k}"

    def widened(value):
        return value if dtype == "float32" else T.Cast("float32", value)

    @T.prim_func(s_tir=True)
    def mma_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (_LANES, local_ab), dtype, scope="warp", offset_factor=1)
        B = T.match_buffer(b, (_LANES, local_ab), dtype, scope="warp", offset_factor=1)
        C = T.match_buffer(c, (_LANES, local_c), "float32", scope="warp", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:_LANES, 0:local_c], A[0:_LANES, 0:local_ab], B[0:_LANES, 0:local_ab])
            T.writes(C[0:_LANES, 0:local_c])
            for i, j, r in T.grid(_TILE, _TILE, k):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, r])
                    lane_c, index_c = T.meta_var(layout_c(vi, vj))
                    lane_a, index_a = T.meta_var(layout_a(vi, vk))
                    lane_b, index_b = T.meta_var(layout_b(vk, vj))
                    T.reads(C[lane_c, index_c], A[lane_a, index_a], B[lane_b, index_b])
                    T.writes(C[lane_c, index_c])
                    C[lane_c, index_c] = C[lane_c, index_c] + widened(A[lane_a, index_a]) * widened(
                        B[lane_b, index_b])

    @T.prim_func(s_tir=True)
    def mma_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (_LANES, local_ab), dtype, scope="warp", offset_factor=1)
        B = T.match_buffer(b, (_LANES, local_ab), dtype, scope="warp", offset_factor=1)
        C = T.match_buffer(c, (_LANES, local_c), "float32", scope="warp", offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:_LANES, 0:local_c], A[0:_LANES, 0:local_ab], B[0:_LANES, 0:local_ab])
            T.writes(C[0:_LANES, 0:local_c])
            for tx in T.thread_binding(0, _LANES, "threadIdx.x"):
                for half in T.unroll(2):
                    T.evaluate(T.ptx_legacy.mma(
                        ptx_shape, "row", "col", ptx_type, ptx_type, "fp32",
                        A.data, A.elem_offset + tx * local_ab,
                        B.data, B.elem_offset + tx * local_ab + half * (local_ab // 2),
                        C.data, C.elem_offset + tx * local_c + half * (local_c // 2),
                        False, dtype="float32"))

    return mma_desc, mma_impl
