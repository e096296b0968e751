"""GPU code for sm_80 / sm_90 / gfx90a / gfx942, produced on a machine without a GPU; runs on one when present."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from conftest import data_dir
from xcomp.backends import get_backend
from xcomp.costmodel import knob_vector
from xcomp.errors import TargetError

CUDA_ARCHS = ["sm_80", "sm_90"]
ROCM_ARCHS = ["gfx90a", "gfx942"]


# -- small Relax models, scheduled by schedules/gpu and built with tvm.compile --------------------------------------


def _conv_relu():
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 28, 28), "float32"))
    w = relax.Var("w", relax.TensorType((32, 16, 3, 3), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def _matmul_relu(dtype, m=128, k=256, n=256):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), dtype))
    w = relax.Var("w", relax.TensorType((k, n), dtype))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w, out_dtype="float32"))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def _attention_scores_f16(batch=2, queries=96, keys=80, dim=64):
    """softmax-free attention scores Q @ K^T / 8 in float16, sizes no whole number of 64-wide tiles."""
    from tvm import relax

    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((batch, queries, dim), "float16"))
    k = relax.Var("k", relax.TensorType((batch, keys, dim), "float16"))
    with bb.function("main", [q, k]):
        with bb.dataflow():
            scores = bb.emit(relax.op.matmul(q, relax.op.permute_dims(k, [0, 2, 1]), out_dtype="float32"))
            scaled = bb.emit(relax.op.multiply(scores, relax.const(0.125, "float32")))
            out = bb.emit_output(relax.op.astype(scaled, "float16"))
        bb.emit_func_output(out)
    return bb.get()


def _linear_f16(m=100, k=96, n=80):
    """x @ w^T with w stored [N, K], as torch's Linear keeps it: B's K axis is the contiguous one."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float16"))
    w = relax.Var("w", relax.TensorType((n, k), "float16"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w, [1, 0]), out_dtype="float32"))
            out = bb.emit_output(relax.op.astype(y, "float16"))
        bb.emit_func_output(out)
    return bb.get()


def _grouped_conv_bias(channels=136, groups=4, side=14):
    """shufflenet's 14x14 grouped 1x1 conv with its folded batch norm: dlight schedules it as a reduction with
    several output channels per thread and an element-wise epilogue."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, side, side), "float32"))
    w = relax.Var("w", relax.TensorType((channels, channels // groups, 1, 1), "float32"))
    b = relax.Var("b", relax.TensorType((1, channels, 1, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, groups=groups))
            out = bb.emit_output(relax.op.add(y, b))
        bb.emit_func_output(out)
    return bb.get()


MODELS = {"conv_f32": _conv_relu, "matmul_f32": lambda: _matmul_relu("float32"),
          "matmul_f16": lambda: _matmul_relu("float16"), "attention_f16": _attention_scores_f16,
          "linear_f16": _linear_f16, "grouped_conv_f32": _grouped_conv_bias}


def fused(relax_mod):
    """Legalized and fused as the pipeline does before scheduling (TVM's own lowering)."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                     relax.transform.FuseOps(), relax.transform.FuseTIR()])(relax_mod)


def matmul_prim_func(mod):
    """(GlobalVar, PrimFunc) of the one fused group holding a matmul."""
    from tvm import tirx

    (gv, func), = [(gv, f) for gv, f in mod.functions.items()
                   if isinstance(f, tirx.PrimFunc) and "matmul" in gv.name_hint]
    return gv, func


def build(backend, model, knobs=None):
    """Fuse, schedule every PrimFunc with the GPU template, tvm.compile for the backend's target."""
    from tvm import tirx

    from xcomp.schedules import gpu

    mod = fused(MODELS[model]())
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc):
            mod[gv] = gpu.get_template(func, backend.schedule_context()).schedule(knobs)
    return backend.compile(mod)


def emit(backend, model, out_dir, knobs=None) -> dict:
    """{extension: text or bytes} of the device code emitted for `model`."""
    return emit_executable(backend, build(backend, model, knobs), out_dir)


def emit_module(backend, mod, out_dir) -> dict:
    """The same for an already scheduled module."""
    return emit_executable(backend, backend.compile(mod), out_dir)


def emit_executable(backend, executable, out_dir) -> dict:
    paths = backend.emit_sources(executable, str(out_dir))
    device = [p for p in paths if os.path.basename(p).startswith(f"{backend.name}_kernels.")]
    out = {}
    for path in device:
        ext = path.rsplit(".", 1)[1]
        with open(path, "rb") as f:
            data = f.read()
        out[ext] = data if ext == "hsaco" else data.decode()
    return out


def _rocm_backend(arch):
    backend = get_backend(f"rocm:{arch}")
    if backend.toolchain_problem():
        pytest.skip(backend.toolchain_problem())
    return backend


def _cuda_backend(arch):
    from xcomp.backends.cuda.nvcc import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found: PTX cannot be produced (install the CUDA toolkit)")
    return get_backend(f"cuda:{arch}")


# -- the catalog and target strings --------------------------------------------------------------------------------


@pytest.mark.parametrize("target,width", [("cuda:sm_80", 32), ("cuda:sm_90", 32), ("rocm:gfx90a", 64),
                                          ("rocm:gfx942", 64)])
def test_catalog_spec_is_complete(target, width):
    spec = get_backend(target).spec
    assert spec.is_gpu and spec.simd_width == width and spec.max_threads_per_block == 1024
    assert spec.cores > 0 and spec.shared_mem_per_block > 0 and spec.registers_per_block > 0
    assert spec.mem_bandwidth > 1e12 and spec.peak("float16") > spec.peak("float32") > 1e13
    assert any(m.in_dtype == "float16" for m in spec.matrix_cores)


def test_target_dicts():
    cuda = get_backend("cuda:sm_90").target()
    assert cuda.kind.name == "cuda" and cuda.attrs["arch"] == "sm_90" and cuda.host.kind.name == "llvm"
    assert int(cuda.attrs["thread_warp_size"]) == 32
    rocm = get_backend("rocm:gfx942").target()
    assert rocm.kind.name == "rocm" and rocm.attrs["mcpu"] == "gfx942" and int(rocm.attrs["thread_warp_size"]) == 64


@pytest.mark.parametrize("target,known", [("cuda:sm_75", "cuda:sm_80, cuda:sm_90"),
                                          ("rocm:gfx1100", "rocm:gfx90a, rocm:gfx942")])
def test_unknown_arch_lists_known_ones(target, known):
    with pytest.raises(TargetError, match=known):
        get_backend(target)


@pytest.mark.parametrize("kind,example", [("cuda", "cuda:sm_90"), ("rocm", "rocm:gfx942")])
def test_no_visible_gpu_asks_for_an_arch(kind, example):
    import tvm

    if getattr(tvm, kind)(0).exist:
        pytest.skip(f"a {kind} GPU is visible here")
    with pytest.raises(TargetError, match=f"no .* GPU is visible.*{example}"):
        get_backend(kind)


# -- CUDA: CUDA C and PTX --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", CUDA_ARCHS)
@pytest.mark.parametrize("model", ["conv_f32", "matmul_f32"])
def test_cuda_source_and_ptx(arch, model, tmp_path):
    code = emit(_cuda_backend(arch), model, tmp_path)
    assert code["cu"].count("__global__") >= 1 and len(code["cu"]) > 1000
    assert f".target {arch}" in code["ptx"] and ".entry" in code["ptx"]
    assert "fma.rn." in code["ptx"]  # fp32 FMAs (TVM compiles with --use_fast_math: fma.rn.ftz.f32)


@pytest.mark.parametrize("arch", CUDA_ARCHS)
def test_cuda_fp16_matmul_uses_tensor_cores(arch, tmp_path):
    ptx = emit(_cuda_backend(arch), "matmul_f16", tmp_path)["ptx"]
    # the matrix-core template: operands through ldmatrix, one 16x16 fragment as two mma.sync m16n8k16
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx


def _main_loop(ptx: str) -> str:
    """The PTX of the loop with the most MMAs: from a label to the branch back to it."""
    import re

    lines = ptx.splitlines()
    labels = {line.strip()[:-1]: n for n, line in enumerate(lines) if re.match(r"^\$L__BB\d+_\d+:$", line.strip())}
    loops = []
    for n, line in enumerate(lines):
        branch = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if branch and labels.get(branch.group(1), n) < n:
            loops.append("\n".join(lines[labels[branch.group(1)]:n + 1]))
    return max(loops, key=lambda body: body.count("mma.sync"), default="")


@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("knobs", [{}, {"k_frags": 1}, {"warps_m": 1, "warps_n": 4, "frags_n": 2},
                                   {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4}],
                         ids=["default", "padded_rows", "rows128", "block128x256"])
def test_pipelined_matrix_core_gemm_copies_with_cp_async_and_spills_nothing(stages, knobs, tmp_path):
    """With pipeline stages, the next K tiles go global -> shared through cp.async while the current one runs its
    ldmatrix + mma: the main loop waits on all but the stages-1 newest copy groups. The shared layouts (permuted,
    padded) keep all of it in the main loop, and ptxas -v reports no spills. A 128 x 256 block of 64 x 64 warp
    tiles (128 accumulators a thread) takes up to 209 KB of dynamic shared memory at 3 stages: past the 48 KiB a
    block gets without opting in."""
    from xcomp.schedules import gpu

    backend = _cuda_backend("sm_90")
    template = gpu.get_template(matmul_prim_func(fused(_matmul_relu("float16")))[1], backend.schedule_context())
    knobs = {**template.default_knobs(), **knobs, "stages": stages}
    assert template.valid(knobs), knobs
    ptx = emit(backend, "matmul_f16", tmp_path, knobs)["ptx"]
    loop = _main_loop(ptx)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared" in loop and "ldmatrix.sync.aligned.m8n8.x4.trans" in loop
    assert "mma.sync.aligned.m16n8k16" in loop
    if stages > 1:
        assert "cp.async.cg.shared.global" in loop and f"cp.async.wait_group {stages - 1};" in loop
    else:
        assert "st.shared.v4" in loop and "cp.async" not in ptx
    assert_no_spills(ptx, tmp_path)


def _kernel_body(cuda_source: str) -> str:
    """The kernels of a CUDA source, without the type helpers printed ahead of them (they differ by type)."""
    return cuda_source[cuda_source.index('extern "C" __global__'):]


def test_bfloat16_gemm_is_the_float16_kernel_on_bf16_operands(tmp_path):
    """TVM registers ldmatrix and mma.sync tensor intrinsics for float16 only, so bfloat16 GEMMs ran dlight's SIMT
    rule (0.03x cuBLAS on an H200). With xcomp's bfloat16 intrinsics the matrix-core template emits the float16
    kernel, line for line, on bfloat16: B through the transposing ldmatrix (a call that lost its element type
    became a scalar gather loop there), mma.sync on .bf16 operands, and ptxas reports no spills."""
    from xcomp.schedules import gpu

    backend = _cuda_backend("sm_90")
    code = {}
    for dtype in ("float16", "bfloat16"):
        mod = fused(_matmul_relu(dtype))
        gv, func = matmul_prim_func(mod)
        template = gpu.get_template(func, backend.schedule_context())
        assert isinstance(template, gpu.MatrixCoreTemplate), dtype
        mod[gv] = template.schedule(template.default_knobs())
        code[dtype] = emit_module(backend, mod, tmp_path / dtype)
    loop = _main_loop(code["bfloat16"]["ptx"])
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in loop
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in loop and "cp.async" in loop
    renamed = _kernel_body(code["bfloat16"]["cu"]).replace("nv_bfloat16", "half").replace("bf16", "f16")
    assert renamed == _kernel_body(code["float16"]["cu"])
    assert_no_spills(code["bfloat16"]["ptx"], tmp_path)


def assert_no_spills(ptx: str, tmp_path, arch: str = "sm_90") -> None:
    """ptxas -v (where the CUDA toolkit is installed) reports no local-memory spills in any kernel of `ptx`."""
    import shutil
    import subprocess

    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if os.path.exists(ptxas):
        (tmp_path / "k.ptx").write_text(ptx)
        report = subprocess.run([ptxas, "-v", f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", os.devnull],
                                capture_output=True, text=True).stderr
        assert "0 bytes spill stores, 0 bytes spill loads" in report and "spill stores" in report, report


# -- ROCm: AMDGPU assembly and the HSA code object --------------------------------------------------------------------


@pytest.mark.parametrize("arch", ROCM_ARCHS)
@pytest.mark.parametrize("model", ["conv_f32", "matmul_f32"])
def test_rocm_asm_and_code_object(arch, model, tmp_path):
    code = emit(_rocm_backend(arch), model, tmp_path)
    assert f'.amdgcn_target "amdgcn-amd-amdhsa-hcc-{arch}"' in code["s"]
    assert "s_endpgm" in code["s"] and "v_pk_fma_f32" in code["s"]  # packed fp32 FMAs
    hsaco = code["hsaco"]
    assert hsaco[:4] == b"\x7fELF" and struct.unpack_from("<H", hsaco, 0x12)[0] == 224  # EM_AMDGPU
    kernel = next(line.split()[1] for line in code["s"].splitlines() if line.strip().startswith(".amdhsa_kernel "))
    assert kernel.encode() in hsaco


def test_rocm_code_object_is_what_the_linker_wrote(tmp_path):
    """The .hsaco cut from the module is byte for byte the linker's output (the ELF-size rule holds)."""
    import tvm_ffi

    from xcomp.backends.rocm import toolchain

    backend = _rocm_backend("gfx942")
    linked = []

    def recording_link(relocatable):
        linked.append(bytes(toolchain.link_code_object(relocatable)))
        return bytearray(linked[-1])

    tvm_ffi.register_global_func("tvm_callback_rocm_link", recording_link, override=True)
    try:
        hsaco = emit(backend, "matmul_f32", tmp_path)["hsaco"]
    finally:
        tvm_ffi.register_global_func("tvm_callback_rocm_link", toolchain.link_code_object, override=True)
    assert linked == [hsaco]


@pytest.mark.parametrize("arch", ROCM_ARCHS)
def test_rocm_fp16_matmul_uses_mfma(arch, tmp_path):
    asm = emit(_rocm_backend(arch), "matmul_f16", tmp_path)["s"]
    # 128x256 output in 16x16 fragments, k = 256 in steps of 16: every fragment's MMA is one MFMA
    assert "v_mfma_f32_16x16x16" in asm


def test_missing_linker_is_a_clear_error(monkeypatch):
    from xcomp.backends.rocm import toolchain

    monkeypatch.setattr(toolchain, "find_linker", lambda: None)
    with pytest.raises(TargetError, match="apt-get install lld-22"):
        toolchain.link_code_object(b"")


# -- the schedule templates -------------------------------------------------------------------------------------------

MATRIX_CORE_INSTRUCTION = {"cuda": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "rocm": "v_mfma_f32_16x16x16"}


def _backend(target):
    kind, arch = target.split(":")
    return _cuda_backend(arch) if kind == "cuda" else _rocm_backend(arch)


@pytest.mark.parametrize("model", ["attention_f16", "linear_f16"])
@pytest.mark.parametrize("target", ["cuda:sm_80", "rocm:gfx90a"])
def test_matrix_core_template_configs_build(target, model, tmp_path):
    """Sampled configs of the one matrix-core template build for both vendors, on a batched Q @ K^T and on a
    linear layer with its weight stored [N, K] (loaded element-wise: not contiguous along N), sizes that need
    padding, and every one of them runs its MMAs on the matrix cores."""
    import random

    from xcomp.schedules import gpu

    backend = _backend(target)
    mod = fused(MODELS[model]())
    gv, func = matmul_prim_func(mod)
    template = gpu.get_template(func, backend.schedule_context())
    assert isinstance(template, gpu.MatrixCoreTemplate)
    configs = [template.default_knobs()] + [template.sample(random.Random(seed)) for seed in range(3)]
    for index, knobs in enumerate(configs):
        mod[gv] = template.schedule(knobs)
        code = emit_module(backend, mod, tmp_path / str(index))
        device_code = code["ptx"] if "ptx" in code else code["s"]
        assert MATRIX_CORE_INSTRUCTION[backend.name] in device_code, knobs


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_matrix_core_knobs_respect_the_spec(target):
    from xcomp.schedules import gpu

    backend = get_backend(target)
    spec = backend.spec
    template = gpu.get_template(matmul_prim_func(fused(_matmul_relu("float16")))[1], backend.schedule_context())
    configs = list(template.enumerate())
    assert template.default_knobs() in configs and 50 < len(configs) < template.space_size()
    knob_vector(template.default_knobs())  # every knob has a cost-model feature slot
    for knobs in configs:
        block_m, block_n, block_k = (knobs["warps_m"] * knobs["frags_m"] * 16, knobs["warps_n"] * knobs["frags_n"] * 16,
                                     knobs["k_frags"] * 16)
        assert knobs["warps_m"] * knobs["warps_n"] * spec.simd_width <= spec.max_threads_per_block
        stages = knobs["stages"]
        assert stages == 1 or "cp.async" in spec.features  # pipelined copies only where they are asynchronous
        # at least the unpadded operand stages and accumulator (test_shared_memory_banks.py checks it lowered)
        assert (stages * (block_m + block_n) * block_k * 2 + block_m * block_n * 4 <= template.shared_bytes(knobs)
                <= template.shared_limit())
    # on NVIDIA, configs past what a block gets without opting in are searched too
    beyond = [knobs for knobs in configs if template.shared_bytes(knobs) > spec.shared_mem_per_block]
    assert bool(beyond) == (backend.name == "cuda"), beyond[:1]


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_matrix_core_default_tile_follows_the_grid(target):
    """The default block tile by the blocks it gives the spec's SMs (132 on sm_90): 128 x 128 with 3 stages for a
    4096^2 output (1024 blocks), 64 x 64 for 1024^2 (64 blocks of 128 x 128 would leave SMs idle), 32 x 32 for
    128 x 256 (8 blocks of 64 x 64). Each is valid on its spec: gfx942's 64 KiB of LDS, without cp.async, holds
    no 128 x 128 tile with its float32 accumulator, so it keeps 64 x 64 there."""
    from xcomp.schedules import gpu

    backend = get_backend(target)
    tiles = {}
    for m, n in ((4096, 4096), (1024, 1024), (128, 256)):
        func = matmul_prim_func(fused(_matmul_relu("float16", m=m, k=256, n=n)))[1]
        template = gpu.get_template(func, backend.schedule_context())
        knobs = template.default_knobs()
        assert template.valid(knobs), (m, n, knobs)
        tiles[m, n] = (knobs["warps_m"] * knobs["frags_m"] * 16, knobs["warps_n"] * knobs["frags_n"] * 16,
                       knobs["stages"])
    if backend.name == "cuda":
        assert tiles == {(4096, 4096): (128, 128, 3), (1024, 1024): (64, 64, 2), (128, 256): (32, 32, 2)}
    else:
        assert tiles == {(4096, 4096): (64, 64, 1), (1024, 1024): (64, 64, 1), (128, 256): (32, 32, 1)}


def test_float32_matmuls_keep_the_simt_template():
    from xcomp.schedules import gpu

    func = matmul_prim_func(fused(_matmul_relu("float32")))[1]
    for target in ("cuda:sm_90", "rocm:gfx942"):
        assert isinstance(gpu.get_template(func, get_backend(target).schedule_context()), gpu.DlightTemplate)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_a_reduction_epilogue_reads_no_other_thread_s_registers(target):
    """dlight's Reduction rule gives each thread several output channels of a pixel, written in its own loop order,
    and splits the element-wise epilogue's loops in theirs, so epilogue threads read values other threads wrote:
    those must be in shared memory (dlight left them thread-local: shufflenet's logits were wrong on an H200)."""
    from gpu_threads import foreign_local_reads
    from xcomp.schedules import gpu

    conv = next(f for gv, f in fused(_grouped_conv_bias()).functions.items() if "conv2d" in gv.name_hint)
    scheduled = gpu.get_template(conv, get_backend(target).schedule_context()).schedule(None)
    assert "_rf" in scheduled.script()  # the rule under test (an rfactor over threads) scheduled it
    assert foreign_local_reads(scheduled) == []


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
@pytest.mark.parametrize("name", ["light_shufflenet", "light_densenet121", "light_inception_v2"])
def test_no_gpu_kernel_of_a_light_model_reads_another_thread_s_registers(target, name):
    """Every group of the model as scheduled for the GPU: each element of a thread-local buffer is read only by
    threads that wrote it (gpu_threads.py), which a CPU can check and only a GPU would otherwise show."""
    from gpu_threads import foreign_local_reads
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.pipeline import schedule_group

    backend = get_backend(target)
    _, groups = partition(load_onnx(data_dir("light", name + ".onnx")).mod, backend.spec, [])
    ctx = backend.schedule_context()
    found = {group.name: foreign_local_reads(schedule_group(group, ctx, None)[0]) for group in groups}
    assert {group: reads for group, reads in found.items() if reads} == {}


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_template_knobs_respect_the_spec(target):
    from xcomp.schedules import gpu

    backend = get_backend(target)
    spec = backend.spec
    conv = next(f for gv, f in fused(_conv_relu()).functions.items() if "conv2d" in gv.name_hint)
    template = gpu.get_template(conv, backend.schedule_context())
    assert template.kind == "matmul" and isinstance(template, gpu.DlightTemplate)  # fp32: dlight's SIMT rule
    configs = list(template.enumerate())
    assert template.default_knobs() in configs and len(configs) > 100
    knob_vector(template.default_knobs())  # every knob has a cost-model feature slot
    for knobs in configs:
        threads = knobs["block_x"] * knobs["block_y"]
        assert threads <= spec.max_threads_per_block and threads % spec.simd_width == 0


# -- on a real GPU ---------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cuda", "rocm"])
@pytest.mark.parametrize("model", ["matmul_f32", "matmul_f16", "attention_f16", "grouped_conv_f32"])
def test_runs_on_visible_gpu(kind, model):
    import tvm
    from tvm import relax

    if not getattr(tvm, kind)(0).exist:
        pytest.skip(f"no {kind} GPU visible")
    backend = get_backend(kind)
    vm = relax.VirtualMachine(build(backend, model), backend.device())
    rng = np.random.default_rng(0)
    if model == "attention_f16":
        q, k = (rng.standard_normal((2, n, 64)).astype("float16") for n in (96, 80))
        args = (q, k)
        want = (q.astype(np.float32) @ k.astype(np.float32).transpose(0, 2, 1)) * 0.125
    elif model == "grouped_conv_f32":
        args = (rng.standard_normal((1, 136, 14, 14)).astype("float32"),
                rng.standard_normal((136, 34, 1, 1)).astype("float32"),
                rng.standard_normal((1, 136, 1, 1)).astype("float32"))
        x, w, b = (a.astype(np.float64) for a in args)
        want = np.einsum("gkc,gchw->gkhw", w.reshape(4, 34, 34), x.reshape(4, 34, 14, 14)).reshape(1, 136, 14, 14) + b
    else:
        dtype = "float16" if model.endswith("f16") else "float32"
        args = (rng.standard_normal((128, 256)).astype(dtype), rng.standard_normal((256, 256)).astype(dtype))
        want = np.maximum(args[0].astype(np.float32) @ args[1].astype(np.float32), 0)
    got = vm["main"](*(tvm.runtime.tensor(a, backend.device()) for a in args)).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["matmul_f16", "linear_f16"])
@pytest.mark.parametrize("knobs", [{}, {"stages": 1}, {"stages": 3}, {"k_frags": 1, "stages": 4},
                                   {"k_frags": 4, "vector": 4}, {"warps_m": 1, "warps_n": 4, "frags_n": 2, "stages": 2},
                                   {"warps_m": 1, "warps_n": 1, "frags_n": 1}],
                         ids=["default", "stages1", "stages3", "k16_padded_stages4", "k64_vector4", "n128_stages2",
                              "n16_padded"])
def test_matrix_core_shared_layouts_on_visible_gpu(model, knobs):
    """Each shared-memory layout of the matrix-core template (TVM's permuted rows of 32, 64 and 128 elements, padded
    rows of 16, with and without cp.async stages; a linear layer's element-wise copies) against numpy on the GPU."""
    import tvm
    from tvm import relax

    from xcomp.schedules import gpu

    if not tvm.cuda(0).exist:
        pytest.skip("no cuda GPU visible")
    backend = get_backend("cuda")
    mod = fused(MODELS[model]())
    gv, func = matmul_prim_func(mod)
    template = gpu.get_template(func, backend.schedule_context())
    knobs = {**template.default_knobs(), **knobs}
    assert template.valid(knobs), knobs
    mod[gv] = template.schedule(knobs)
    vm = relax.VirtualMachine(backend.compile(mod), backend.device())
    rng = np.random.default_rng(0)
    if model == "linear_f16":
        x, w = rng.standard_normal((100, 96)).astype("float16"), rng.standard_normal((80, 96)).astype("float16")
        want = x.astype(np.float32) @ w.astype(np.float32).T
    else:
        x, w = rng.standard_normal((128, 256)).astype("float16"), rng.standard_normal((256, 256)).astype("float16")
        want = np.maximum(x.astype(np.float32) @ w.astype(np.float32), 0)
    got = vm["main"](*(tvm.runtime.tensor(a, backend.device()) for a in (x, w))).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


# -- the whole pipeline ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_light_resnet50_cross_compiles(target, tmp_path):
    import xcomp

    if target.startswith("rocm"):
        _rocm_backend("gfx942")
    module = xcomp.compile(data_dir("light", "light_resnet50.onnx"), target=target, progress=False)
    paths = module.emit_sources(tmp_path)
    assert any(p.endswith(".ptx" if target.startswith("cuda") else ".hsaco") for p in paths)


def _fp16_mlp_onnx():
    """x[64,256] @ w1 + b1 -> relu -> @ w2, all float16, as torch.onnx would export a half-precision MLP."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float16), name)
               for name, shape in (("w1", (256, 512)), ("b1", (512,)), ("w2", (512, 128)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp_f16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [64, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64, 128])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fp16_conv_onnx(kernel=3, stride=1):
    """A float16 conv with bias and ReLU; a 1x1 one is what reindexing leaves without its unit window axes."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float16), name)
               for name, shape in (("w", (32, 16, kernel, kernel)), ("b", (32,)))]
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    side = (28 + 2 * pad - kernel) // stride + 1
    graph = helper.make_graph(nodes, "conv_f16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 32, side, side])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bf16_matmul_onnx(k=2048):
    """x[64, k] @ w[k, 64] in bfloat16, both operands inputs: a long K that a bfloat16 accumulator ruins."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul_bf16",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [64, k]),
                               helper.make_tensor_value_info("w", TensorProto.BFLOAT16, [k, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [64, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("model,kernels", [(_fp16_mlp_onnx, 2), (_fp16_conv_onnx, 1),
                                           (lambda: _fp16_conv_onnx(kernel=1), 1),
                                           (lambda: _fp16_conv_onnx(kernel=1, stride=2), 1)],
                         ids=["mlp", "conv3x3", "conv1x1", "conv1x1_stride2"])
@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_onnx_fp16_matmuls_use_matrix_cores(target, model, kernels, tmp_path):
    """A float16 ONNX model's matmuls and convs (implicit GEMMs) accumulate in float32 on the matrix cores, bias
    and ReLU fused behind them."""
    import xcomp

    _backend(target)
    module = xcomp.compile(model(), target=target, progress=False)
    paths = module.emit_sources(tmp_path)
    device = next(p for p in paths if os.path.basename(p) in ("cuda_kernels.ptx", "rocm_kernels.s"))
    with open(device) as f:
        code = f.read()
    entries = [line for line in code.splitlines() if line.strip().startswith((".visible .entry", ".amdhsa_kernel "))]
    assert len(entries) == kernels  # one per matmul or conv: the epilogues are fused, nothing else is left
    assert code.count(MATRIX_CORE_INSTRUCTION[target.split(":")[0]]) >= kernels


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_bfloat16_matmul_accumulates_in_float32(target):
    """TVM's own lowering sums bfloat16 products in bfloat16: on an H200 a 4096-long dot product came out wrong by
    18% of the output's range. The legalized group must reduce into float32 and cast back once."""
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition

    spec = get_backend(target).spec
    _, groups = partition(load_onnx(_bf16_matmul_onnx()).mod, spec, [])
    (group,) = [g for g in groups if g.kind == "matmul"]
    script = group.func.script()
    assert 'T.Cast("float32", x[' in script and 'T.Cast("bfloat16",' in script


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cuda", "rocm"])
@pytest.mark.parametrize("name", ["bf16_matmul", "fp16_conv1x1_stride2"])
def test_half_precision_onnx_on_visible_gpu(kind, name):
    """The float16 / bfloat16 ONNX models above, through xcomp.compile, against float64 numpy."""
    import tvm

    import xcomp

    if not getattr(tvm, kind)(0).exist:
        pytest.skip(f"no {kind} GPU visible")
    rng = np.random.default_rng(0)
    if name == "bf16_matmul":
        import ml_dtypes

        module = xcomp.compile(_bf16_matmul_onnx(), target=kind)
        x, w = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16) for shape in ((64, 2048), (2048, 64)))
        want = x.astype(np.float64) @ w.astype(np.float64)
        got = module(x, w)
    else:
        from onnx import numpy_helper

        model = _fp16_conv_onnx(kernel=1, stride=2)
        module = xcomp.compile(model, target=kind)
        x = rng.standard_normal((1, 16, 28, 28)).astype(np.float16)
        w, b = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer)
        conv = np.einsum("kc,nchw->nkhw", w[:, :, 0, 0], x.astype(np.float64)[:, :, ::2, ::2])
        want = np.maximum(conv + b[None, :, None, None], 0)
        got = module(x)
    got = np.asarray(got, dtype=np.float64)
    assert np.max(np.abs(got - want)) <= 1e-2 * np.max(np.abs(want))


def _conv_chain_onnx():
    """Three 3x3 convs: the middle kernels use statically planned buffers, which CUDA-graph rewriting captures."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
               for name, shape in (("w1", (8, 4, 3, 3)), ("w2", (8, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1] * 4), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["y"], pads=[1] * 4)]
    graph = helper.make_graph(nodes, "conv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_cuda_graph_option_captures_the_kernels_in_between(cuda_graph):
    import xcomp

    module = xcomp.compile(_conv_chain_onnx(), target="cuda:sm_90", cuda_graph=cuda_graph)
    vm_code = module._executable.as_text()
    assert ("vm.builtin.cuda_graph.run_or_capture" in vm_code) == cuda_graph
    assert module.info["cuda_graph"] == cuda_graph


def test_cuda_graph_needs_a_cuda_target():
    import xcomp

    with pytest.raises(TargetError, match="CUDA graphs need a CUDA target"):
        xcomp.compile(_conv_chain_onnx(), target="cpu", cuda_graph=True)


@pytest.mark.gpu
def test_a_cuda_graph_replays_with_each_call_s_inputs():
    """Captured on the first call, replayed after: every call must see its own input, as without the graph."""
    import tvm

    import xcomp

    if not tvm.cuda(0).exist:
        pytest.skip("no cuda GPU visible")
    plain = xcomp.compile(_conv_chain_onnx(), target="cuda")
    graphed = xcomp.compile(_conv_chain_onnx(), target="cuda", cuda_graph=True)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
        np.testing.assert_allclose(graphed(x), plain(x), rtol=1e-5, atol=1e-5)
