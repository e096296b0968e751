"""Symbolic batch and sequence dims kept symbolic: one module serves every size, checked against onnxruntime;
clear errors for shapes it cannot serve; save/load, `xcomp info`, `xcomp tune` and `xcomp run` on such a model."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xcomp
from conftest import assert_matches_ort, make_model
from dynamic_models import attention, cnn, mlp, positions_after_past, random_feed, range_from_past
from test_cli import xcomp_cli


@pytest.fixture(scope="module")
def attention_module():
    model = attention("batch", "seq")
    return xcomp.compile(model), model


def test_mlp_serves_every_batch(tmp_path):
    from tvm import s_tir

    from xcomp.schedules import get_template
    from xcomp.schedules.cpu.legalize import SYMBOLIC_ROW_BLOCK
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    model = mlp("batch")
    module = xcomp.compile(model)
    assert [(s.name, s.shape) for s in module.inputs] == [("x", ("batch", 64))]
    assert [(s.name, s.shape) for s in module.outputs] == [("y", ("batch", 10))]
    assert all(g.symbols == ("batch",) for g in module.groups)
    for batch in (1, 2, 3, 5, 8):  # rows padded to 4 (see legalize.py): whole, part and no padding tile
        assert_matches_ort(module, model, random_feed({"x": (batch, 64)}, seed=batch))
    # a symbolic M keeps the register-tiled matmul template, with row tiles dividing the padded rows (no
    # predicate in the tile); the 10-column layer too, though its weight is not packed
    for group in module.groups:
        template = get_template(group.func, module.backend.schedule_context())
        assert isinstance(template, MatmulTemplate)
        assert template.knob_space()["mr"] == [1, 2, 4]
        knobs = template.default_knobs()
        assert SYMBOLIC_ROW_BLOCK % knobs["mr"] == 0 and knobs["order"] == "n_outer"
        for mr in (1, 2):
            template.apply(s_tir.Schedule(group.func), {**knobs, "mr": mr})  # no silent fallback
    # the shape function a symbolic model gets must not cost the kernels their alias information (LLVM kept
    # the accumulators in memory, 2x slower; see pipeline._shape_funcs_noalias)
    sources = module.emit_sources(tmp_path)
    llvm_ir = next(p for p in sources if p.endswith(".ll"))
    with open(llvm_ir) as f:
        assert "tvm-alias" not in f.read()


def test_a_batch_of_one_skips_the_rows_padding_adds():
    """At batch 1 the layers whose columns make whole vectors run tiles of one row, those of the padding rows
    skipped (matmul._one_row); the 10-column layer keeps the padded tiles. batch 1 is among the checked batches
    of test_mlp_serves_every_batch."""
    from tvm import tirx

    from xcomp.schedules import get_template

    module = xcomp.compile(mlp("batch"))
    for group in module.groups:
        func = get_template(group.func, module.backend.schedule_context()).schedule()
        choice = func.body.block.body
        if group.signature.endswith("-> batchx10xf32"):
            assert not isinstance(choice, tirx.IfThenElse)
            continue
        assert isinstance(choice, tirx.IfThenElse) and str(choice.condition) == "batch == T.int64(1)"
        one_row = choice.then_case.script()
        assert "T.unroll(T.int64(1))" in one_row and "T.unroll(T.int64(4))" in choice.else_case.script()
        assert "(batch + T.int64(3)) // T.int64(4) * T.int64(4)) < batch:" in one_row  # the padding rows' test


def test_cnn_serves_every_batch():
    from tvm import s_tir

    from xcomp.schedules import get_template
    from xcomp.schedules.cpu.conv import DirectConvTemplate

    model = cnn("N")
    module = xcomp.compile(model)
    assert module.inputs[0].shape == ("N", 3, 32, 32)
    for batch in (1, 3, 8):
        assert_matches_ort(module, model, random_feed({"x": (batch, 3, 32, 32)}, seed=batch))
    # a symbolic batch is only the outermost loop: the convs keep their register-tiled template
    for group in (g for g in module.groups if g.kind == "conv"):
        template = get_template(group.func, module.backend.schedule_context())
        assert isinstance(template, DirectConvTemplate)
        template.apply(s_tir.Schedule(group.func), template.default_knobs())  # no silent fallback


def test_attention_serves_every_batch_and_sequence(attention_module):
    module, model = attention_module
    assert [(s.name, s.shape) for s in module.inputs] == [("x", ("batch", "seq", 32)),
                                                          ("mask", ("batch", "seq", "seq"))]
    for batch, seq in ((1, 1), (2, 7), (4, 16), (1, 37)):  # tiles padded: none, partly, whole, several
        assert_matches_ort(module, model, random_feed({"x": (batch, seq, 32), "mask": (batch, seq, seq)}))


def test_attention_matmuls_over_symbolic_sequences_are_register_tiled(attention_module):
    """Q @ K^T (symbolic M and N) and P @ V (symbolic M and K) keep the matmul template: the schedule pads the
    symbolic M and N to whole tiles (pad_einsum) rather than falling back to the generic scalar schedule."""
    from tvm import s_tir

    from xcomp.schedules import get_template
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    module, _ = attention_module
    activation_by_activation = []
    for group in module.groups:
        template = get_template(group.func, module.backend.schedule_context())
        if group.kind == "matmul" and isinstance(template, MatmulTemplate) and \
                (template.n is None or template.k is None):
            activation_by_activation.append(template)
            knobs = template.default_knobs()
            assert template.lanes == module.spec.simd_width and knobs["mr"] > 1
            for mr in template.knob_space()["mr"]:  # every row tile pads and schedules
                template.apply(s_tir.Schedule(group.func), {**knobs, "mr": mr})
    assert len(activation_by_activation) == 2  # Q @ K^T and P @ V


def test_reshapes_over_symbolic_dims_are_views():
    """Reshapes and squeezes over symbolic dims (attention's head split and merge) run as views of their input,
    as static ones do, not as copy kernels: scheduled first, a symbolic reshape hid its pattern from the VM
    lowering, and this encoder ran six squeezes and four reshapes as copies."""
    import os

    from tvm import relax

    model = onnx.load(os.path.join(os.path.dirname(__file__), "models", "encoder_op17.onnx"))
    module = xcomp.compile(model)
    for batch, seq in ((1, 5), (3, 32)):
        feed = {"input_ids": np.random.default_rng(seq).integers(0, 100, (batch, seq)),
                "attention_mask": np.ones((batch, seq), np.int64)}
        assert_matches_ort(module, model, feed)
    assert [g.name for g in module.groups if relax.analysis.has_reshape_pattern(g.func)] == []


def test_positions_after_a_kv_cache_keep_the_sequence_dim():
    """A decoder with past key/values counts positions from the cache's length: range(past, past + seq). The
    range keeps the dim `seq` (not a new unknown length), so the model compiles with both dims symbolic, and one
    module serves the prompt (an empty cache) and every decoding step."""
    model = positions_after_past()
    module = xcomp.compile(model)
    assert [(s.name, s.shape) for s in module.outputs] == [("y", (1, "seq", 8))]
    for seq, past in ((5, 0), (1, 5), (1, 6), (3, 60)):
        assert_matches_ort(module, model, random_feed({"x": (1, seq, 8), "past_k": (1, 2, past, 4)}, seed=past))


def test_a_cache_growing_each_call_keeps_memory_flat():
    """A decode loop feeds each call's grown cache to the next, so every call's tensors have a size no earlier
    call had. The VM's pool reuses a freed block only for the same size: unless the module releases its free
    blocks when the shapes change, it holds one block per cache length (here about 320 MB after 400 steps)."""
    rows = 1024
    nodes = [helper.make_node("Mul", ["token", "two"], ["scaled"]),
             helper.make_node("Concat", ["cache", "scaled"], ["grown"], axis=1)]
    model = make_model(nodes, [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, "past", rows]),
                               helper.make_tensor_value_info("token", TensorProto.FLOAT, [1, 1, rows])],
                       [helper.make_tensor_value_info("grown", TensorProto.FLOAT, [1, "total", rows])],
                       [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    module = xcomp.compile(model)

    def resident_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    cache, token = np.zeros((1, 0, rows), np.float32), np.ones((1, 1, rows), np.float32)
    cache = module(cache, token)
    before = resident_mb()
    for _ in range(400):
        cache = module(cache, token)
    grown = resident_mb() - before
    assert cache.shape == (1, 401, rows) and np.all(cache == 2)
    assert grown < 64, f"resident memory grew {grown:.0f} MB over 400 steps"


def test_a_kernel_taking_the_cache_length_only_as_a_size_fuses():
    """Over a cache [1, past + seq, 8] a kernel takes `past` as an argument, since no buffer dim gives it alone.
    It only sizes the kernel's buffers, so the divide after the matmul is the matmul's epilogue, not a kernel of
    its own (as one taking a computed scalar still is, test_positions_after_a_kv_cache_keep_the_sequence_dim)."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=1),
             helper.make_node("MatMul", ["present", "w"], ["y"]),
             helper.make_node("Div", ["y", "scale"], ["z"])]
    value = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    model = make_model(nodes, [value("past", [1, "past", 8]), value("new", [1, "seq", 8])],
                       [value("z", [1, "total", 32])],
                       [numpy_helper.from_array(rng.uniform(-1, 1, (8, 32)).astype(np.float32), "w"),
                        numpy_helper.from_array(np.array(8.0, np.float32), "scale")])
    module = xcomp.compile(model)
    assert sorted(g.kind for g in module.groups) == ["injective", "matmul"]  # the concat, then matmul / 8
    for past, seq in ((0, 3), (5, 1), (40, 2)):
        assert_matches_ort(module, model, random_feed({"past": (1, past, 8), "new": (1, seq, 8)}, seed=past))


@pytest.mark.parametrize("step", [1, -1, 2, -3])
def test_a_range_from_the_cache_length_counts_either_way(step):
    """range(past, 4, step) for caches shorter and longer than 4: empty where the step points away."""
    model = range_from_past(step, 4)
    module = xcomp.compile(model)
    for past in (0, 1, 4, 9):
        assert_matches_ort(module, model, random_feed({"past_k": (1, 2, past, 4)}, seed=past))


def test_shapes_it_cannot_serve(attention_module):
    """Checked on every call, also after a call of shapes that fit (the module remembers the last such shapes,
    to skip their check when they come again)."""
    module, _ = attention_module
    x, mask = random_feed({"x": (2, 5, 32), "mask": (3, 5, 5)}).values()
    module(x, mask[:2])
    with pytest.raises(xcomp.InputError, match=r"inputs 'x' and 'mask' share dim 'batch': input 'x' dim 0 is 2, "
                                               r"so input 'mask' dim 0 must be 2 too, got 3"):
        module(x, mask)
    with pytest.raises(xcomp.InputError, match=r"input 'x': expected shape \['batch', 'seq', 32\], got \[2, 5, 16\]"):
        module(x[..., :16], mask[:2])
    with pytest.raises(xcomp.InputError, match=r"input 'x': expected shape \['batch', 'seq', 32\], got \[10, 32\]"):
        module(x.reshape(10, 32), mask[:2])
    module(x, mask[:2])
    with pytest.raises(xcomp.InputError, match=r"share dim 'batch'"):
        module(x, mask)


def test_unnamed_dims_get_names():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])])
    module = xcomp.compile(model)
    assert module.inputs[0].shape == ("x_dim0", 4)
    assert_matches_ort(module, model, random_feed({"x": (5, 4)}))


def test_input_shape_still_specializes():
    module = xcomp.compile(mlp("batch"), input_shapes={"x": (4, 64)})
    assert module.inputs[0].shape == (4, 64) and not any(g.symbols for g in module.groups)
    with pytest.raises(xcomp.InputError, match=r"expected shape \[4, 64\], got \[3, 64\]"):
        module(np.zeros((3, 64), np.float32))


def test_save_load_keeps_symbolic_dims(attention_module, tmp_path):
    module, model = attention_module
    loaded = xcomp.load(module.save(tmp_path / "attention.xc"))
    assert loaded.inputs == module.inputs and loaded.outputs == module.outputs
    assert [g.symbols for g in loaded.groups] == [g.symbols for g in module.groups]
    assert_matches_ort(loaded, model, random_feed({"x": (3, 6, 32), "mask": (3, 6, 6)}))
    assert {k: v.shape for k, v in loaded.random_inputs(input_shapes={"x": (2, 9, 32)}).items()} == \
        {"x": (2, 9, 32), "mask": (2, 9, 9)}


def test_info_shows_flops_as_expressions():
    from xcomp.tools.inspect_model import describe

    info = describe(attention("batch", "seq"))
    assert info["symbols"] == ["batch", "seq"]
    assert "batch * seq * seq" in info["total_flops_expr"]
    assert all("flops_expr" in g and g["symbols"] for g in info["groups"])


def test_symbolic_groups_are_not_tuned(tmp_path):
    result = xcomp.tune(mlp("batch"), db=str(tmp_path / "t.sqlite"), trials=4)
    assert result["groups"] == [] and result["trials"] == 0
    assert {g["kind"] for g in result["untuned_symbolic"]} == {"matmul"}
    assert all(g["symbols"] == ["batch"] for g in result["untuned_symbolic"])


def test_cli_run_picks_sizes_and_says_so(tmp_path):
    onnx.save(attention("batch", "seq"), tmp_path / "attention.onnx")
    r = xcomp_cli("compile", str(tmp_path / "attention.onnx"), "-o", str(tmp_path / "a.xc"), "-q")
    assert r.returncode == 0, r.stderr
    r = xcomp_cli("run", str(tmp_path / "a.xc"), "-q")
    assert r.returncode == 0, r.stderr
    assert "x float32[1, 1, 32], mask float32[1, 1, 1]" in r.stdout
    r = xcomp_cli("run", str(tmp_path / "a.xc"), "-q", "--json", "--input-shape", "x=2,5,32")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["inputs"]["mask"]["shape"] == [2, 5, 5] and summary["outputs"]["y"]["shape"] == [2, 5, 32]
    r = xcomp_cli("run", str(tmp_path / "a.xc"), "-q", "--input-shape", "x=2,5,32", "--input-shape", "mask=3,5,5")
    assert r.returncode == 1 and "share dim 'batch'" in r.stderr and "Traceback" not in r.stderr
