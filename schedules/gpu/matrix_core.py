"""Matrix-core matmul for GPUs: block and warp tiles of 16 x 16 tensor-core fragments, staged in shared memory.

One schedule for every vendor. What differs between them (the MMA instruction, how a warp's lanes hold a fragment,
the shared-memory scope) comes from the backend's `FragmentIntrinsics`; sizes come from the `HardwareSpec`.

It takes a group whose single reduction is C[S, I, J] += float32(A[S, I, K]) * float32(B[S, K, J]) on float16
operands (or on float32 operands, on the matrix cores' tfloat32 shapes, where the user opted in: ctx.tf32), in any
index order TVM's legalization wrote it, with fused producers (e.g. a transpose) and consumers
(bias, activation, a cast back to float16); a conv2d is one too (an implicit GEMM: K runs over input channels and
the window). The reduction is normalized to that form and padded to whole block tiles; producers are inlined into
the shared-memory loads, consumers into the write-back.

Per block: warps_m x warps_n warps, each computing frags_m x frags_n fragments; K advances k_frags fragments per
shared-memory stage.

Shared-memory layouts (docs/decisions/shared-memory-banks.md; tests/gpu_banks.py counts the bank conflicts): where
the fragments load through ldmatrix, an operand tile whose rows are a multiple of 32 elements takes TVM's XOR-permuted
layout (its InjectPermutedLayout pass rewrites the copies' and ldmatrix's addresses alike), other rows are padded, and
the accumulator rows are padded so the fragment stores spread over the banks. Where the fragments load element by
element (tfloat32), each operand's rows are padded to the pitch at which a warp's loads of one register touch
every bank once, found from the fragment layout itself.
"""

from __future__ import annotations

import functools
import math

from ..template import Declined, Knob, Knobs, Template

FRAGMENT = 16  # rows and columns of one output fragment
_PERMUTED_ROWS = 32  # TVM's permuted layout takes rows of a multiple of 32 elements (four 16-byte chunks)
_ROW_ALIGN = (32, 8)  # padded rows: a stride of 8 more than a multiple of 32 elements
_ACC_DTYPE = "float32"
_WIDENED = ("float16", "bfloat16")  # operand types whose products are summed in _ACC_DTYPE
_TF32 = "tfloat32"  # the matrix cores' type for float32 operands (10 mantissa bits), with ctx.tf32 only
_BANKS, _BANK_BYTES = 32, 4  # shared memory where the intrinsics have bank_layouts
_CHUNK_BYTES = 16  # a padded row stays a whole number of 16-byte chunks (vector copies, cp.async)


def _gemm_block(sch):
    """The one reduction block of a GEMM-shaped function, or None (dlight's analysis: C[S,I,J] += A*B)."""
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import detect_iter_traits, get_reduction_blocks

    blocks = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if blocks is None or detect_iter_traits(sch.get(blocks[0])) is None:
        return None
    return blocks[0]


def _loads_through_ldmatrix(intrinsics) -> bool:
    """Whether the fragment loads are NVIDIA's ldmatrix (whose 8-row phases the shared layouts are laid out for)."""
    from tvm.s_tir import TensorIntrin

    return all("ldmatrix" in TensorIntrin.get(name).impl.script() for name in (intrinsics.load_a, intrinsics.load_b))


def _operand_dtypes(block) -> tuple[str, str, str]:
    return str(block.reads[0].source.dtype), str(block.reads[1].source.dtype), str(block.writes[0].source.dtype)


def float32_gemm(func) -> bool:
    """Whether `func` is a GEMM (a matmul, or a conv as an implicit GEMM) on float32 operands summed in float32:
    the groups whose math --tf32 changes."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    block = _gemm_block(sch)
    return block is not None and set(_operand_dtypes(sch.get(block))) == {_ACC_DTYPE}


def matrix_core_intrinsics(func, ctx):
    """The backend's fragment intrinsics when `func` is a GEMM its matrix cores can run, else None."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    block = _gemm_block(sch)
    if block is None:
        return None
    a, b, c = _operand_dtypes(sch.get(block))
    if a != b or c != _ACC_DTYPE:
        return None
    if a == _ACC_DTYPE:  # float32 operands: tf32 changes the results, so only where the user opted in
        return ctx.fragment_intrinsics(_TF32, c) if ctx.tf32 else None
    return ctx.fragment_intrinsics(a, c)


@functools.lru_cache(maxsize=None)
def _conflict_free_pitch(layout, rows: int, cols: int, row: int, elem_bytes: int) -> int | None:
    """The smallest row pitch (elements, from `row` on in 16-byte steps) at which one warp's element-wise loads of a
    rows x cols fragment (lane and register of each element from `layout`) touch each bank once per register, or
    None. A fragment's place in the tile moves every lane's address alike, so one fragment stands for all."""
    registers = {}
    for r in range(rows):
        for c in range(cols):
            registers.setdefault(layout(r, c)[1], []).append((r, c))
    step = max(1, _CHUNK_BYTES // elem_bytes)
    for pitch in range(row, row + _BANKS * _BANK_BYTES // elem_bytes, step):
        words = [{(r * pitch + c) * elem_bytes // _BANK_BYTES for r, c in cells} for cells in registers.values()]
        if all(len({w % _BANKS for w in ws}) == len(ws) for ws in words):
            return pitch
    return None


def legalize_map(spec) -> dict:
    """float16 and bfloat16 matmuls and convs accumulate in float32, then cast back: TVM's own lowering
    accumulates in the operands' type, which loses most of bfloat16's 8 bits over a long K (a 4096-long dot
    product was off by 18% of the output's range on an H200) and which no MFMA instruction does. The matrix-core
    template takes the float32-accumulating form where the spec's matrix cores run it (a conv as an implicit
    GEMM); dlight takes the rest."""
    import tvm
    from tvm import relax

    def widened(op_name, rebuild):
        """op_name's legalization, computing a 16-bit float call in float32 (rebuild(call) makes that call)."""
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb, call):
            a, b = call.args[:2]
            dtype = str(call.ty.dtype)
            if not (str(a.ty.dtype) == str(b.ty.dtype) == dtype and dtype in _WIDENED):
                return default(bb, call)
            return relax.op.astype(bb.emit(default(bb, bb.normalize(rebuild(call)))), dtype)

        return legalize

    def conv2d(call):
        a = call.attrs
        return relax.op.nn.conv2d(*call.args, strides=a.strides, padding=a.padding, dilation=a.dilation,
                                  groups=a.groups, data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                                  out_layout=a.out_layout, out_dtype=_ACC_DTYPE)

    return {"relax.matmul": widened("relax.matmul", lambda call: relax.op.matmul(*call.args, out_dtype=_ACC_DTYPE)),
            "relax.nn.conv2d": widened("relax.nn.conv2d", conv2d)}


def _contiguous_operands(block) -> tuple[bool, bool]:
    """Whether A's innermost normalized axis (K) and B's (J) are the innermost axes of the buffers they read, so a
    thread can load several neighbours at once; where not (a conv's input window, a weight stored [N, K]) the
    loads into shared memory go element by element (a vector gather also breaks TVM's CUDA code generation)."""
    from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits

    *_, block_traits = detect_iter_traits(block)
    kinds = {iv.var: trait.kind for iv, trait in zip(block.iter_vars, block_traits)}

    def innermost(kind):
        return next((v for v in reversed(list(kinds)) if kinds[v] == kind), None)

    def contiguous(region, kind):
        last = region.region[-1].min
        return innermost(kind) is not None and last.same_as(innermost(kind))

    return contiguous(block.reads[0], IterKind.kIter_K), contiguous(block.reads[1], IterKind.kIter_J)


def _operand_traits(block, region, rank) -> list:
    """The iter traits of one operand's axes as `sch.reindex` kept them in a buffer of `rank` dims: in block
    order, less the unit-extent reduction axes where reindex dropped them (a 1x1 conv's window inside `y + ry`),
    which dlight's traits still list."""
    from tvm.s_tir.dlight.gpu.matmul import detect_iter_traits
    from tvm.tirx.analysis import undefined_vars

    *_, block_traits = detect_iter_traits(block)
    used = {v for r in region.region for v in undefined_vars(r.min)}
    axes = [(iv, trait) for iv, trait in zip(block.iter_vars, block_traits) if iv.var in used]
    if len(axes) > rank:
        axes = [(iv, t) for iv, t in axes if not (iv.iter_type == iv.CommReduce and _is_one(iv.dom.extent))]
    if len(axes) != rank:
        raise ValueError(f"cannot match {len(axes)} axes of {region.source.name} to its reindexed {rank} dims")
    return [trait for _, trait in axes]


def _output_extents(block) -> tuple[int, int, int] | None:
    """(batch, rows, columns) of the normalized GEMM C[S, I, J], or None where one of them is symbolic."""
    from tvm import tirx
    from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits

    *_, block_traits = detect_iter_traits(block)
    extents = {IterKind.kIter_S: 1, IterKind.kIter_I: 1, IterKind.kIter_J: 1}
    for trait in block_traits:
        if trait.kind in extents:
            if not isinstance(trait.extent, tirx.IntImm):
                return None
            extents[trait.kind] *= int(trait.extent)
    return tuple(extents.values())


def _is_one(expr) -> bool:
    return getattr(expr, "value", None) == 1


def _normalize(sch, block) -> None:
    """Rewrite the GEMM block as C[S, I, J] += A[S, I, K] * B[S, K, J] over reindexed copies of its buffers."""
    from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits, make_iter_fusion_index_map

    S, I, J, K = IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_J, IterKind.kIter_K
    stmt = sch.get(block)
    *_, block_traits = detect_iter_traits(stmt)
    for (kind, index), order in zip((("read", 0), ("read", 1), ("write", 0)), ([S, I, K], [S, K, J], [S, I, J])):
        region = (stmt.reads if kind == "read" else stmt.writes)[index]
        copy = sch.reindex(block, (kind, index))
        side = ("write", 0) if kind == "read" else ("read", 0)  # where the copy block touches the new buffer
        new_buffer = (sch.get(copy).writes if kind == "read" else sch.get(copy).reads)[0].source
        traits = _operand_traits(stmt, region, len(new_buffer.shape))
        sch.transform_layout(copy, side, make_iter_fusion_index_map(traits, order))
    sch.transform_block_layout(block, make_iter_fusion_index_map(block_traits, [S, I, J, K]))


class MatrixCoreTemplate(Template):
    kind = "matmul"
    knobs = (Knob("warps_m", int, 24, "warps of a block along M"),
             Knob("warps_n", int, 25, "warps of a block along N"),
             Knob("frags_m", int, 4, "matrix-core fragments per warp along M"),
             Knob("frags_n", int, 5, "matrix-core fragments per warp along N"),
             Knob("k_frags", int, 6, "fragments along K per shared-memory tile"),
             Knob("vector", int, 22, "elements per vector copy into shared memory"),
             Knob("stages", int, 28, "shared-memory tiles in flight (cp.async pipeline)"))

    @classmethod
    def create(cls, func, ctx, kind: str) -> MatrixCoreTemplate:  # noqa: ARG003
        intrinsics = matrix_core_intrinsics(func, ctx)
        if intrinsics is None:
            raise Declined("no matrix-core instruction for this GEMM's operand types")
        return cls(func, ctx, intrinsics)

    #: "banks": the layouts against bank conflicts above; "dense": plain row-major tiles, the reference that
    #: tests/gpu_banks.py compares what each thread reads with
    shared_layout = "banks"

    def __init__(self, func, ctx, intrinsics):
        import tvm
        from tvm import s_tir

        super().__init__(func, ctx)
        self.intrinsics = intrinsics  # backends.gpu.FragmentIntrinsics
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        block = sch.get(_gemm_block(sch))
        self.operand_bytes = tvm.DataType(_operand_dtypes(block)[0]).bits // 8  # float16: 2, float32 (tf32): 4
        self.contiguous = _contiguous_operands(block)
        self.output_extents = _output_extents(block)
        # TVM's permuted layout rewrites ldmatrix addresses; other fragment loads keep padded rows
        self.ldmatrix = _loads_through_ldmatrix(intrinsics)

    def knob_space(self) -> dict[str, list]:
        widest = self._widest_vector()
        return {"warps_m": [1, 2, 4], "warps_n": [1, 2, 4], "frags_m": [1, 2, 4], "frags_n": [1, 2, 4],
                "k_frags": [1, 2, 4], "vector": [widest // 2, widest] if any(self.contiguous) else [1],
                # shared-memory tiles in flight: more than one only where copies can run asynchronously
                "stages": [1, 2, 3, 4] if "cp.async" in self.spec.features else [1]}

    def default_knobs(self) -> Knobs:
        """The block tile by how many blocks the output gives the spec's SMs (docs/gpu-results.md): 2x2 warps of
        4x4 fragments (128 x 128) where even those give every SM a block, 2x1 warps of 1x2 fragments (32 x 32)
        where 64 x 64 blocks would leave more than half of the SMs idle, 2x2 of 2x2 (64 x 64) between them and
        where the extents are symbolic. Pipelined where both operands copy whole vectors (cp.async): 3 stages for
        the 128 x 128 tile, 2 for the others; waiting on each tile's copy left the matrix cores idle."""
        base = {"k_frags": self._default_k_frags(), "vector": self._widest_vector() if any(self.contiguous) else 1,
                "stages": 1}
        large = {**base, "warps_m": 2, "warps_n": 2, "frags_m": 4, "frags_n": 4}
        medium = {**base, "warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2}
        small = {**base, "warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2}
        tiles = [(medium, 2)]  # (tile, its pipeline stages), the first valid one taken
        if self.output_extents is not None and self._blocks(large) >= self.spec.cores:
            tiles.insert(0, (large, 3))
        elif self.output_extents is not None and 2 * self._blocks(medium) < self.spec.cores:
            tiles.insert(0, (small, 2))
        asynchronous = "cp.async" in self.spec.features and all(self.contiguous)
        candidates = [{**tile, "stages": stages} for tile, stages in tiles if asynchronous]
        candidates += [tile for tile, _ in tiles]
        return next((knobs for knobs in candidates if self.valid(knobs)), medium)

    def _blocks(self, knobs: Knobs) -> int:
        """Thread blocks in the grid of `knobs` (static extents only)."""
        bm, bn, _ = self._block_tile(knobs)
        batch, rows, cols = self.output_extents
        return batch * -(-rows // bm) * -(-cols // bn)

    def _default_k_frags(self) -> int:
        """2; where the fragments load element by element, as many as make A's rows 128 bytes (tfloat32: 4): a
        16-byte copy phase then stays within one row, so the padding that spreads the loads over the banks leaves
        the copies clean too (rows of 64 bytes pay a second wavefront per copy at any pitch)."""
        f = self.intrinsics
        if f.bank_layouts and not self.ldmatrix:
            return max(1, _BANKS * _BANK_BYTES // (f.k * self.operand_bytes))
        return 2

    def _widest_vector(self) -> int:
        """Operand elements in the widest copy a thread makes into shared memory (8 float16, 4 float32)."""
        return min(8, self.spec.vector_bytes // self.operand_bytes)

    def finish(self, func):
        """Indices in int32 where every buffer is small enough: TVM's own narrowing gives up on the permuted
        layout's XOR and would leave the kernel's address arithmetic in 64 bits."""
        import tvm
        from tvm import tirx

        shapes = [param.shape for param in func.params if hasattr(param, "shape")]  # buffers are params here
        if not shapes or not all(isinstance(d, tirx.IntImm) for shape in shapes for d in shape):
            return func
        if max(math.prod(int(d) for d in shape) for shape in shapes) >= 2**31:
            return func
        return tirx.transform.ForceNarrowIndexToInt32()(tvm.IRModule({"main": func}))["main"]

    def fallback_schedule(self):
        """dlight's SIMT schedule: slower, but a GEMM this template cannot tile still builds (the pipeline
        reports the group as 'generic')."""
        from .dlight_template import DlightTemplate

        return DlightTemplate(self.func, self.ctx).schedule(None)

    def _block_tile(self, knobs: Knobs) -> tuple[int, int, int]:
        return (knobs["warps_m"] * knobs["frags_m"] * FRAGMENT, knobs["warps_n"] * knobs["frags_n"] * FRAGMENT,
                knobs["k_frags"] * self.intrinsics.k)

    def _permuted(self, row: int) -> bool:
        """Whether an operand tile with rows of `row` elements takes TVM's XOR-permuted shared layout."""
        return self.shared_layout == "banks" and self.ldmatrix and row % _PERMUTED_ROWS == 0

    def _operand_align(self, operand: int, row: int) -> tuple[int, int] | None:
        """storage_align's (factor, offset) for the shared tile of operand 0 (A) or 1 (B), rows of `row` elements;
        None where the rows stay dense (the permuted layout, or shared_layout "dense")."""
        f = self.intrinsics
        if self.shared_layout != "banks" or self._permuted(row):
            return None
        if f.bank_layouts and not self.ldmatrix:  # element-wise fragment loads: the pitch their layout wants
            layout, rows, cols = (f.layout_a, FRAGMENT, f.k) if operand == 0 else (f.layout_b, f.k, FRAGMENT)
            pitch = _conflict_free_pitch(layout, rows, cols, row, self.operand_bytes)
            factor = _BANKS * _BANK_BYTES // self.operand_bytes
            return (factor, pitch % factor) if pitch is not None else _ROW_ALIGN
        return _ROW_ALIGN

    def _accumulator_align(self) -> tuple[int, int] | None:
        return _ROW_ALIGN if self.shared_layout == "banks" and self.intrinsics.bank_layouts else None

    @staticmethod
    def _pitch(row: int, align: tuple[int, int] | None) -> int:
        """Elements from one row of a shared tile to the next: `row`, or padded as storage_align pads it."""
        if align is None:
            return row
        factor, offset = align
        return row + (offset - row) % factor

    def shared_bytes(self, knobs: Knobs) -> int:
        """Shared memory the config's tiles take at most: every operand stage and the float32 accumulator tile
        (TVM may let the accumulator reuse the operands' space, which only makes it less)."""
        bm, bn, bk = self._block_tile(knobs)
        operands = bm * self._pitch(bk, self._operand_align(0, bk)) + bk * self._pitch(bn, self._operand_align(1, bn))
        accumulator = bm * self._pitch(bn, self._accumulator_align())
        return knobs.get("stages", 1) * operands * self.operand_bytes + accumulator * 4

    def shared_limit(self) -> int:
        """Shared memory a block of this template may take: tiles in dynamic shared memory ("shared.dyn") are
        sized at launch and may fill what the arch lets a kernel opt in to (large block tiles, more stages)."""
        dynamic = self.intrinsics.shared_scope == "shared.dyn"
        return self.spec.dynamic_shared_mem if dynamic else self.spec.shared_mem_per_block

    def valid(self, knobs: Knobs) -> bool:
        threads = knobs["warps_m"] * knobs["warps_n"] * self.intrinsics.lanes
        # one 16-byte (or narrower) load per lane must not exceed what the vector registers take
        return (threads <= self.spec.max_threads_per_block
                and self.shared_bytes(knobs) <= self.shared_limit()
                and knobs["vector"] * self.operand_bytes <= self.spec.vector_bytes)

    def apply(self, sch, knobs: Knobs) -> None:
        from tvm.s_tir.dlight.gpu.matmul import auto_inline_consumer_chain, auto_inline_producers

        f = self.intrinsics
        block = _gemm_block(sch)
        _normalize(sch, block)
        bm, bn, bk = self._block_tile(knobs)
        sch.pad_einsum(block, [1, bm, bn, bk])

        batch, i, j, k = sch.get_loops(block)
        i, i_frag = sch.split(i, [None, FRAGMENT])
        j, j_frag = sch.split(j, [None, FRAGMENT])
        k, k_frag = sch.split(k, [None, f.k])
        sch.reorder(i, j, k, i_frag, j_frag, k_frag)
        fragment_mma = block
        tile = sch.blockize(i_frag)  # one fragment's MMA per iteration from here on

        i_block, i_warp, i_inner = sch.split(i, [None, knobs["warps_m"], knobs["frags_m"]])
        j_block, j_warp, j_inner = sch.split(j, [None, knobs["warps_n"], knobs["frags_n"]])
        k_stage, k_inner = sch.split(k, [None, knobs["k_frags"]])
        sch.reorder(i_block, j_block, i_warp, j_warp, k_stage, k_inner, i_inner, j_inner)
        sch.bind(batch, "blockIdx.z")
        sch.bind(sch.fuse(i_block, j_block), "blockIdx.x")
        warps = sch.fuse(i_warp, j_warp)
        sch.bind(warps, "threadIdx.y")
        warp_count = knobs["warps_m"] * knobs["warps_n"]

        for operand in (0, 1):  # A and B tiles into shared memory, every thread loading `vector` elements at once
            stage = sch.cache_read(tile, operand, f.shared_scope)
            sch.compute_at(stage, k_stage)
            loop = sch.fuse(*sch.get_loops(stage)[-2:])
            vector = knobs["vector"] if self.contiguous[operand] else 1
            _, ty, tx, vec = sch.split(loop, [None, warp_count, f.lanes, vector])
            sch.bind(ty, "threadIdx.y")
            sch.bind(tx, "threadIdx.x")
            sch.vectorize(vec)
            row = bk if operand == 0 else bn
            align = self._operand_align(operand, row)
            if self._permuted(row):
                sch.annotate(stage, "permuted_layout", 1)
            elif align is not None:
                sch.storage_align(stage, 0, axis=-2, factor=align[0], offset=align[1])
            auto_inline_producers(sch, stage)

        frag_a = sch.cache_read(tile, 0, "warp")
        frag_b = sch.cache_read(tile, 1, "warp")
        sch.compute_at(frag_a, k_inner)
        sch.compute_at(frag_b, k_inner)
        write_back = sch.cache_write(tile, 0, f.shared_scope)  # accumulators -> shared -> epilogue -> output
        accumulator = sch.cache_write(tile, 0, "warp")
        sch.reverse_compute_at(accumulator, warps)
        sch.reverse_compute_at(write_back, warps)
        init = sch.decompose_reduction(tile, k_stage)
        stages = knobs.get("stages", 1)
        if stages > 1:  # the next stages' tiles load (cp.async where the spec has it) while this one computes
            sch.annotate(k_stage, "software_pipeline_stage", [0, 0, stages - 1])
            sch.annotate(k_stage, "software_pipeline_order", [0, 1, 2])
            sch.annotate(k_stage, "software_pipeline_async_stages", [0])

        def fragment_loops(blk, rows, cols):
            r, c = sch.get_loops(blk)[-2:]
            r_outer, r_inner = sch.split(r, [None, rows])
            c_outer, c_inner = sch.split(c, [None, cols])
            sch.reorder(r_outer, c_outer, r_inner, c_inner)
            return r_inner

        def register_layout(layout, rows, cols):
            return lambda *idx: (*idx[:-2], idx[-2] // rows, idx[-1] // cols, *layout(idx[-2] % rows, idx[-1] % cols))

        load_a = fragment_loops(frag_a, FRAGMENT, f.k)
        load_b = fragment_loops(frag_b, f.k, FRAGMENT)
        store = fragment_loops(accumulator, FRAGMENT, FRAGMENT)
        sch.transform_layout(frag_a, ("write", 0), register_layout(f.layout_a, FRAGMENT, f.k))
        sch.transform_layout(frag_b, ("write", 0), register_layout(f.layout_b, f.k, FRAGMENT))
        sch.transform_layout(accumulator, ("read", 0), register_layout(f.layout_c, FRAGMENT, FRAGMENT))
        for load, intrin, row in ((load_a, f.load_a, bk), (load_b, f.load_b, bn)):
            fragment_load = sch.blockize(load)
            sch.tensorize(fragment_load, intrin)
            if self._permuted(row):  # ldmatrix reads the tile in the layout its copy wrote
                sch.annotate(fragment_load, "permuted_layout", 1)
        sch.tensorize(sch.get_loops(fragment_mma)[-3], f.compute)
        sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], f.fill)
        fragment_store = sch.blockize(store)
        sch.tensorize(fragment_store, f.store)
        if self._accumulator_align() is not None:  # the accumulator tile's rows, padded
            factor, offset = self._accumulator_align()
            sch.storage_align(fragment_store, 0, axis=-2, factor=factor, offset=offset)

        auto_inline_consumer_chain(sch, write_back)
        loop = sch.fuse(*sch.get_loops(write_back)[-2:])
        _, tx, vec = sch.split(loop, [None, f.lanes, 4])
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
