"""Blocked channel layout between convs (xcomp/graph/layout.py) and numpy constant folding (xcomp/graph/const_fold.py):
the convs that should run blocked do, everything else stays NCHW, and the numbers stay onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model


def _const(name, shape, seed, low=-0.5, high=0.5):
    values = np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)
    return numpy_helper.from_array(values, name)


def _cnn():
    """x[1,3,12,12] -> RGB conv (3 in: reads NCHW) -> 16ch block: conv+BN+relu, 1x1 conv + residual add,
    max pool, concat with a second branch, dropout, global pool, classifier."""
    nodes = [
        helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["a"], ["a1"]),
        helper.make_node("Conv", ["a1", "W1"], ["b"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["b", "s", "o", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["b1"]),
        helper.make_node("Conv", ["b1", "W2", "B2"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["c", "a1"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "W3"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Concat", ["p", "d"], ["cat"], axis=1),
        helper.make_node("Dropout", ["cat"], ["dr"]),
        helper.make_node("GlobalAveragePool", ["dr"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "Wf"], ["y"], transB=1),
    ]
    inits = [_const("W0", (16, 3, 3, 3), 1), _const("W1", (16, 16, 3, 3), 2), _const("s", (16,), 3, 0.5, 1.5),
             _const("o", (16,), 4), _const("m", (16,), 5), _const("v", (16,), 6, 0.5, 2.0),
             _const("W2", (16, 16, 1, 1), 7), _const("B2", (16,), 8), _const("W3", (32, 16, 3, 3), 9),
             _const("Wf", (10, 48), 10)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits, opset=13)


def _conv_groups(module):
    return [g for g in module.groups if g.kind == "conv"]


def _output_dims(group) -> int:
    return len(group.signature.split(" -> ")[1].split("x")) - 1  # "1x16x12x12xf32": the dtype is last


def test_convs_with_whole_channel_vectors_run_blocked_and_match_onnxruntime():
    model = _cnn()
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    convs = _conv_groups(module)
    # every conv writes channel vectors; the RGB stem (3 input channels) reads NCHW, the others vectors
    assert [_output_dims(g) for g in convs] == [5] * 4, [g.signature for g in convs]
    assert sorted(g.signature.startswith("1x3x12x12xf32") for g in convs) == [False, False, False, True]
    assert module.info["notes"] == []  # nothing left out, nothing to tell


def test_a_layout_inference_failure_keeps_nchw(monkeypatch):
    """TVM's ConvertLayout crashes on some ops (e.g. a reduction over a blocked axis): the model must still
    compile, unblocked, and stay correct."""
    from tvm import relax

    def broken(*_args, **_kwargs):
        @relax.transform.function_pass(opt_level=0, name="broken")
        def _pass(func, mod, ctx):
            raise RuntimeError("layout inference failed")

        return _pass

    monkeypatch.setattr(relax.transform, "ConvertLayout", broken)
    model = _cnn()
    module = xcomp.compile(model, progress=False)
    x = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    assert [_output_dims(g) for g in _conv_groups(module)] == [4] * 4
    # and the user is told (xcomp compile prints the notes)
    assert any("NCHW" in note and "layout inference failed" in note for note in module.info["notes"])


@pytest.mark.parametrize("mapping", [
    lambda n, c, h, w: (n, c // 16, h, w, c % 16),  # NCHW -> NCHW16c data
    lambda o, i, h, w: (o // 16, i // 16, h, w, i % 16, o % 16),  # OIHW -> OIHW16i16o weights
    lambda n, c, h, w: (n, h, w, c),  # NHWC
])
def test_numpy_layout_transform_is_tvms(mapping):
    import tvm
    from tvm import tirx

    from xcomp.graph.const_fold import layout_transform

    index_map = tirx.IndexMap.from_func(mapping)
    value = np.random.default_rng(0).standard_normal((32, 32, 3, 2)).astype(np.float32)
    expected = index_map.map_tensor(tvm.runtime.tensor(value)).numpy()
    np.testing.assert_array_equal(layout_transform(value, index_map, expected.shape), expected)


def test_numpy_folding_agrees_with_tvm_fold_constant():
    """A batch-norm chain on parameters bound to variables (as the importer emits them) folds to the value TVM's
    FoldConstant computes, and nothing foldable is left for it."""
    import tvm
    from tvm import relax

    from xcomp.graph.const_fold import fold_constants

    rng = np.random.default_rng(0)
    var, gamma = (relax.const(rng.uniform(0.5, 2, (1, 8, 1, 1)).astype(np.float32)) for _ in range(2))
    weight = relax.const(rng.standard_normal((8, 16)).astype(np.float32))
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v = bb.emit(var)
            std = bb.emit(relax.op.sqrt(relax.op.add(v, relax.const(1e-5, "float32"))))
            scale = bb.emit(relax.op.divide(gamma, std))
            w = bb.emit(relax.op.reshape(relax.op.permute_dims(relax.op.reshape(weight, (16, 8)), [1, 0]),
                                         (1, 8, 4, 4)))
            out = bb.emit_output(relax.op.add(relax.op.multiply(x, scale), w))
        bb.emit_func_output(out)
    mod = bb.get()
    dce = relax.transform.DeadCodeElimination()
    ours = dce(tvm.IRModule({"main": fold_constants(mod["main"])}))["main"]
    theirs = dce(relax.transform.FoldConstant()(mod))["main"]

    def constants(func):
        """The non-scalar tensor constants in `func`."""
        found = []

        def visit(expr):
            value = getattr(expr, "value", None) if isinstance(expr, tvm.ir.expr.Constant) else None
            if hasattr(value, "numpy") and value.numpy().size > 1:
                found.append(value.numpy())

        relax.analysis.post_order_visit(func, visit)
        return found

    assert len(constants(ours)) == len(constants(theirs)) == 2  # scale, the permuted weight
    for a, b in zip(constants(ours), constants(theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert "sqrt" not in ours.script() and "divide" not in ours.script()


def test_lower_rank_constants_do_not_break_the_blocked_chain():
    """A per-channel constant of shape [C, 1, 1] (densenet's pre-activation batch norm) between two convs: the
    chain stays blocked, so the only transforms are into the first conv and out of the last."""
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),  # the relu keeps the scale from folding into Wa
             helper.make_node("Mul", ["r", "k"], ["m"]),
             helper.make_node("Conv", ["m", "Wb"], ["y"], kernel_shape=[1, 1])]
    inits = [_const("Wa", (16, 16, 3, 3), 1), _const("k", (16, 1, 1), 2, 0.5, 1.5), _const("Wb", (16, 16, 1, 1), 3)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits, opset=13)
    module = xcomp.compile(model, progress=False)
    x = {"x": np.random.default_rng(2).uniform(-1, 1, (1, 16, 8, 8)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    transforms = sum(g.count for g in module.groups if "layout_transform" in g.name)
    assert transforms == 2, [(g.name, g.signature) for g in module.groups]


def test_layout_transforms_fuse_with_the_transposes_beside_them():
    """ConvNeXt's block: a blocked conv, a transpose to NHWC, a Linear over the pixels, a transpose back and a
    per-channel scale before the next conv. Each layout transform joins the transpose next to it in one group
    (TVM's scatter form of a layout transform would stay a group of its own), and the Linear tiles its 4 x 4
    pixels as one M."""
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["a"], ["nhwc"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["nhwc", "Wl"], ["l"]),
             helper.make_node("Add", ["l", "bl"], ["lb"]),
             helper.make_node("Transpose", ["lb"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["nchw", "k"], ["m"]),
             helper.make_node("Conv", ["m", "Wb"], ["y"], kernel_shape=[1, 1])]
    inits = [_const("Wa", (16, 16, 3, 3), 1), _const("Wl", (16, 32), 2), _const("bl", (32,), 3),
             _const("k", (32, 1, 1), 4, 0.5, 1.5), _const("Wb", (16, 32, 1, 1), 5)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4, 4])], inits, opset=13)
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(3).uniform(-1, 1, (1, 16, 4, 4)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    names = [g.name for g in module.groups]
    between = [n for n in names if "layout_transform" in n and "transpose" in n]
    assert len(between) == 2, names
    assert [g.signature.split(", ")[0] for g in module.groups if g.kind == "matmul"] == ["1x4x4x16xf32"], names
    linear = next(g for g in module.groups if g.kind == "matmul")
    assert module.info["schedules"][linear.key]["source"] == "default"  # the template's schedule, no fallback
    template = xcomp.schedules.get_template(linear.func, module.backend.schedule_context())
    assert template.m == 16


@pytest.mark.parametrize("channels", [20, 72])
def test_output_channels_are_padded_to_whole_vectors(channels):
    """A conv with 20 output channels (a classifier's 1000, in small) runs blocked on zero-padded weights, and
    the padding channels are sliced off before anything reads them. 72 channels are 9 whole vectors on 8 lanes:
    above 8 vectors an odd count is padded to an even one."""
    from xcomp.graph.channel_padding import padded_channels

    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    inits = [_const("W", (channels, 16, 1, 1), 1), _const("B", (channels,), 2)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])], inits, opset=13)
    module = xcomp.compile(model, progress=False)
    x = {"x": np.random.default_rng(3).uniform(-1, 1, (1, 16, 6, 6)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    lanes = module.spec.simd_width
    (conv,) = _conv_groups(module)
    blocks, _, _, block_lanes = (int(d) for d in conv.signature.split(" -> ")[1].split("x")[1:5])
    assert _output_dims(conv) == 5 and blocks * block_lanes == padded_channels(channels, lanes) > channels


@pytest.mark.parametrize("channels,lanes,padded", [(20, 16, 32), (24, 16, 32), (1000, 16, 1024), (1000, 8, 1008),
                                                   (120, 16, 128), (130, 16, 160)])
def test_padding_gives_wide_convs_an_even_number_of_vectors(channels, lanes, padded):
    from xcomp.graph.channel_padding import padded_channels

    assert padded_channels(channels, lanes) == padded


def _filled(name, value, shape=()):
    return numpy_helper.from_array(np.full(shape, value, np.float32), name)


def _hardswish(form):
    """(nodes computing h = hardswish(a) = a * clip(a + 3, 0, 6) / 6 as `form` spells it, their initializers,
    opset): the ONNX op, torch's a * hardsigmoid(a), or decomposed with constants of shape [], [1] or [1, 1, 1, 1]
    and a Clip taking its bounds as inputs or (before opset 11) as attributes."""
    if form == "HardSwish":
        return [helper.make_node("HardSwish", ["a"], ["h"])], [], 14
    if form == "HardSigmoid":
        return [helper.make_node("HardSigmoid", ["a"], ["s"], alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", ["a", "s"], ["h"])], [], 13
    shape = {"decomposed": (), "decomposed [1]": (1,), "decomposed [1,1,1,1]": (1, 1, 1, 1),
             "clip attributes": ()}[form]
    if form == "clip attributes":
        clip, opset = helper.make_node("Clip", ["p"], ["c"], min=0.0, max=6.0), 10
    else:
        clip, opset = helper.make_node("Clip", ["p", "low", "high"], ["c"]), 13
    nodes = [helper.make_node("Add", ["a", "three"], ["p"]), clip,
             helper.make_node("Mul", ["a", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["h"])]
    inits = [_filled("three", 3, shape), _filled("six", 6, shape), _filled("low", 0), _filled("high", 6)]
    return nodes, inits if opset >= 11 else inits[:2], opset


@pytest.mark.parametrize("form", ["HardSwish", "HardSigmoid", "decomposed", "decomposed [1]",
                                  "decomposed [1,1,1,1]", "clip attributes"])
def test_hardswish_between_convs_keeps_them_blocked(form):
    """mobilenet_v3's hardswish between two convs, in every spelling exporters use: the chain stays blocked (the
    only transforms are into the first conv and out of the last) and the activation runs in the first conv's
    epilogue. TVM's layout inference has no rule for clip (nor sees into the kernels its Clip importer emits)
    and fails on one-element constants of the activation's rank; prepare_for_layout and the Clip converter give
    it scalars and maximum / minimum instead."""
    act, inits, opset = _hardswish(form)
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), *act,
             helper.make_node("Conv", ["h", "Wb"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits += [_const("Wa", (32, 16, 3, 3), 1), _const("Wb", (32, 32, 3, 3), 2)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8, 8])], inits, opset=opset)
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(4).uniform(-4, 4, (1, 16, 8, 8)).astype(np.float32)}  # both sides of the clip
    assert_matches_ort(module, model, x)
    assert module.info["notes"] == []
    assert [_output_dims(g) for g in _conv_groups(module)] == [5, 5]
    transforms = sum(g.count for g in module.groups if "layout_transform" in g.name)
    assert transforms == 2, [(g.name, g.signature) for g in module.groups]


def _squeeze_excite_model():
    """x[1,16,8,8] -> conv -> hardswish -> squeeze-excite (global pool, 1x1 conv to 8 channels, relu, 1x1 conv
    back to 32, hardsigmoid, scaling the map) -> conv, as in mobilenet_v3."""
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["a"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["g"]),
             helper.make_node("Conv", ["g", "Ws", "Bs"], ["s"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "We", "Be"], ["e"], kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["e"], ["gate"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["h", "gate"], ["m"]),
             helper.make_node("Conv", ["m", "Wb"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = [_const("Wa", (32, 16, 3, 3), 1), _const("Ws", (8, 32, 1, 1), 2), _const("Bs", (8,), 3),
             _const("We", (32, 8, 1, 1), 4), _const("Be", (32,), 5), _const("Wb", (32, 32, 3, 3), 6)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8, 8])], inits, opset=14)


def test_squeeze_excite_keeps_the_feature_map_blocked():
    """The feature map stays blocked through the squeeze-excite block: the only transforms of a map are into the
    first conv and out of the last (the pooled [1, 32, 1, 1] vector goes to NCHW for the 8-channel squeeze conv,
    whose output channels are less than a vector)."""
    model = _squeeze_excite_model()
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(5).uniform(-4, 4, (1, 16, 8, 8)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    assert module.info["notes"] == []

    def pixels(group):  # of the transform's input: dims 2 and 3 are H and W in NCHW and NCHW{V}c alike
        dims = [int(d) for d in group.signature.split(" -> ")[0].split("x")[:-1]]
        return dims[2] * dims[3]

    transforms = [g for g in module.groups if "layout_transform" in g.name]
    assert sum(g.count for g in transforms if pixels(g) > 1) == 2, [g.signature for g in transforms]


def _inverted_residual(expanded, stride, activation):
    """x[1,16,8,8] -> 1x1 conv to `expanded` channels -> activation -> 3x3 depthwise conv at `stride` ->
    activation -> 1x1 conv back to 16 (+ x at stride 1), as mobilenet_v2 (relu6 as Clip) and efficientnet (SiLU
    as x * sigmoid(x)) have it."""
    nodes, count = [], iter(range(100))

    def act(name):
        out = f"{name}_act"
        if activation == "relu6":
            nodes.append(helper.make_node("Clip", [name, "low", "high"], [out]))
        else:
            sig = f"{name}_sigmoid{next(count)}"
            nodes.extend([helper.make_node("Sigmoid", [name], [sig]), helper.make_node("Mul", [name, sig], [out])])
        return out

    nodes.append(helper.make_node("Conv", ["x", "We", "Be"], ["e"], kernel_shape=[1, 1]))
    nodes.append(helper.make_node("Conv", [act("e"), "Wd", "Bd"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                  strides=[stride] * 2, group=expanded))
    nodes.append(helper.make_node("Conv", [act("d"), "Wp"], ["p" if stride == 1 else "y"], kernel_shape=[1, 1]))
    if stride == 1:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
    inits = [_const("We", (expanded, 16, 1, 1), 1), _const("Be", (expanded,), 2),
             _const("Wd", (expanded, 1, 3, 3), 3), _const("Bd", (expanded,), 4), _const("Wp", (16, expanded, 1, 1), 5)]
    if activation == "relu6":
        inits += [_filled("low", 0), _filled("high", 6)]
    out = 8 // stride
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, out, out])], inits, opset=13)


@pytest.mark.parametrize("activation", ["relu6", "silu"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_convs_run_blocked_even_where_the_expansion_is_padded(stride, activation):
    """mobilenet_v2's and efficientnet's block: the depthwise conv reads and writes channel vectors like the
    convs around it, so the map is transformed only into the first conv and out of the last. The expansion
    has 9 vectors of channels, which padded_channels pads to 10: the activation runs on all 10 in the conv's
    epilogue and the slice back to 9 vectors slices whole vectors, in the blocked layout
    (blocked_channel_slices)."""
    from xcomp.backends import get_backend
    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.conv_depthwise import BlockedDepthwiseConvTemplate

    lanes = get_backend("cpu").spec.simd_width
    model = _inverted_residual(9 * lanes, stride, activation)
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(6).uniform(-4, 4, (1, 16, 8, 8)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    assert module.info["notes"] == []
    convs = _conv_groups(module)
    assert [_output_dims(g) for g in convs] == [5, 5, 5], [g.signature for g in convs]
    depthwise = [g for g in convs if isinstance(get_template(g.func, module.backend.schedule_context()),
                                                 BlockedDepthwiseConvTemplate)]
    assert len(depthwise) == 1 and depthwise[0].signature.startswith(f"1x9x8x8x{lanes}xf32"), depthwise
    # (x goes in once for the first conv and once more for the residual add: TVM does not merge the two)
    size = 8 // stride
    transforms = {g.signature for g in module.groups if "layout_transform" in g.name}
    assert transforms == {f"1x16x8x8xf32 -> 1x{16 // lanes}x8x8x{lanes}xf32",
                          f"1x{16 // lanes}x{size}x{size}x{lanes}xf32 -> 1x16x{size}x{size}xf32"}


def _unaligned_block(lanes):
    """mobilenet_v3's block with channel counts no vector divides: x[1,16,8,8] -> 1x1 conv to 4.5 vectors of
    channels -> relu6 -> depthwise 3x3 -> squeeze-excite (global pool, 1x1 conv to 8, relu, 1x1 conv back,
    hardsigmoid, scaling the map) -> 1x1 conv to 1.5 vectors, plus a second such projection of x (a residual
    add) -> 1x1 conv back to 16."""
    wide, narrow = 4 * lanes + lanes // 2, lanes + lanes // 2
    nodes = [helper.make_node("Conv", ["x", "We", "Be"], ["e"], kernel_shape=[1, 1]),
             helper.make_node("Clip", ["e", "low", "high"], ["e6"]),
             helper.make_node("Conv", ["e6", "Wd", "Bd"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              group=wide),
             helper.make_node("Clip", ["d", "low", "high"], ["d6"]),
             helper.make_node("GlobalAveragePool", ["d6"], ["g"]),
             helper.make_node("Conv", ["g", "Ws", "Bs"], ["s"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "Wx", "Bx"], ["t"], kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["t"], ["gate"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["d6", "gate"], ["m"]),
             helper.make_node("Conv", ["m", "Wp", "Bp"], ["p"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "Wr"], ["r"], kernel_shape=[1, 1]),
             helper.make_node("Add", ["p", "r"], ["a"]),
             helper.make_node("Conv", ["a", "Wo"], ["y"], kernel_shape=[1, 1])]
    inits = [_const("We", (wide, 16, 1, 1), 1), _const("Be", (wide,), 2), _const("Wd", (wide, 1, 3, 3), 3),
             _const("Bd", (wide,), 4), _const("Ws", (8, wide, 1, 1), 5), _const("Bs", (8,), 6),
             _const("Wx", (wide, 8, 1, 1), 7), _const("Bx", (wide,), 8), _const("Wp", (narrow, wide, 1, 1), 9),
             _const("Bp", (narrow,), 10), _const("Wr", (narrow, 16, 1, 1), 11), _const("Wo", (16, narrow, 1, 1), 12),
             _filled("low", 0), _filled("high", 6)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits, opset=13)


def test_channels_padded_to_whole_vectors_stay_padded_until_a_conv_absorbs_them():
    """A conv whose output channels are no whole vectors runs padded, and its padding channels (zeros) flow on:
    through the activations, the depthwise conv (on zero-padded weights), the pooling and the squeeze-excite's
    scale, into the next 1x1 convs, whose weights are zero-padded along their input channels. So no channel
    slice is left, and the map is transformed only into the first conv and out of the last."""
    from xcomp.backends import get_backend

    lanes = get_backend("cpu").spec.simd_width
    model = _unaligned_block(lanes)
    module = xcomp.compile(model, progress=False, costmodel=False)
    x = {"x": np.random.default_rng(7).uniform(-4, 4, (1, 16, 8, 8)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    assert module.info["notes"] == []
    assert not [g.name for g in module.groups if "strided_slice" in g.name]
    maps = {g.signature for g in module.groups if "layout_transform" in g.name and "x8x8" in g.signature}
    assert maps == {f"1x16x8x8xf32 -> 1x{16 // lanes}x8x8x{lanes}xf32",
                    f"1x{16 // lanes}x8x8x{lanes}xf32 -> 1x16x8x8xf32"}, maps


@pytest.mark.parametrize("divide", ["by the map", "by a constant"])
def test_padding_channels_never_reach_a_conv_as_inf(divide):
    """A padded conv's padding channels are zeros. 1 / x makes them inf, and a conv that absorbed them would
    multiply inf by its zero weights: NaN in every output. So a slice moves past a division only when the slice is
    the dividend; 1 / x keeps it, and the next conv reads only the real channels."""
    from xcomp.backends import get_backend

    lanes = get_backend("cpu").spec.simd_width
    channels = lanes + lanes // 4  # no whole number of vectors: padded, and absorbed by the next conv
    div = (helper.make_node("Div", ["one", "c"], ["d"]) if divide == "by the map"
           else helper.make_node("Div", ["c", "two"], ["d"]))
    nodes = [helper.make_node("Conv", ["x", "Wa", "Ba"], ["c"], kernel_shape=[1, 1]), div,
             helper.make_node("Conv", ["d", "Wb"], ["y"], kernel_shape=[1, 1])]
    inits = [_const("Wa", (channels, 16, 1, 1), 1), _const("Ba", (channels,), 2, 1.0, 2.0),
             _const("Wb", (16, channels, 1, 1), 3), _filled("one", 1), _filled("two", 2)]
    inits = [i for i in inits if i.name != ("two" if divide == "by the map" else "one")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits, opset=13)
    module = xcomp.compile(model, progress=False)
    x = {"x": np.random.default_rng(8).uniform(-0.1, 0.1, (1, 16, 6, 6)).astype(np.float32)}
    assert_matches_ort(module, model, x)
    assert np.isfinite(list(module.run(x).values())[0]).all()
    sliced = any("strided_slice" in g.name for g in module.groups)
    assert sliced == (divide == "by the map"), [g.name for g in module.groups]
