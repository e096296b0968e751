"""Models users bring: small PyTorch models exported by torch.onnx at opsets 13..18, checked against onnxruntime.

The .onnx files and their .npz data (inputs, torch's outputs, the shapes to bind) are made by
tools/make_user_models.py (needs torch==2.13.0; these tests do not). Opsets 13..17 come from torch's legacy
TorchScript exporter, opset 18 from its torch.export-based one (the default since torch 2.9): the two write
quite different graphs for the same model. Every model has symbolic batch (and sequence) dims, bound here
with input_shapes.

Below the corpus: the recurrent-op variants torch never writes (sequence_lens, clip, input_forget, peepholes,
linear_before_reset=0, other activations, layout=1), memory-safe Gather on runtime indices with its range checks,
and the error path of our converters.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import ATOL, RTOL, assert_matches_ort, make_model, ort_run

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
MODELS = sorted(os.path.basename(p)[: -len(".onnx")] for p in glob.glob(os.path.join(MODELS_DIR, "*.onnx")))
FAMILIES = {"encoder", "decoder", "sdpa_decoder", "hf_decoder", "torch_transformer", "mobilenet", "unet", "lstm",
            "gru"}

# Models that cannot pass yet, with the reason and the error they end in (strict: a fix shows up as XPASS and
# must be removed here).
KNOWN_FAILURES: dict[str, tuple] = {}


def _load(name):
    """(model path, {input: array}, [torch outputs], {input: shape})."""
    data = np.load(os.path.join(MODELS_DIR, name + ".npz"))
    inputs = {k[len("in:"):]: data[k] for k in data.files if k.startswith("in:")}
    shapes = {k[len("shape:"):]: tuple(int(d) for d in data[k]) for k in data.files if k.startswith("shape:")}
    outputs = [data[f"out:{i}"] for i in range(sum(k.startswith("out:") for k in data.files))]
    return os.path.join(MODELS_DIR, name + ".onnx"), inputs, outputs, shapes


def _family(name):
    return name.rsplit("_op", 1)[0]


def _opset(name):
    return int(name.rsplit("_op", 1)[1])


def test_corpus_covers_the_families_and_opsets():
    assert {_family(n) for n in MODELS} == FAMILIES
    assert {_opset(n) for n in MODELS} == set(range(13, 19))
    for name in MODELS:  # tiny, so the whole file stays fast: weights well under 2 MB
        assert os.path.getsize(os.path.join(MODELS_DIR, name + ".onnx")) < 2 << 20, name


def _params():
    params = []
    for n in MODELS:
        marks = []
        if n in KNOWN_FAILURES:
            reason, raises = KNOWN_FAILURES[n]
            marks.append(pytest.mark.xfail(strict=True, reason=reason, raises=raises))
        params.append(pytest.param(n, marks=marks))
    return params


@pytest.mark.parametrize("name", _params())
def test_user_model_matches_onnxruntime(name):
    path, inputs, torch_outputs, shapes = _load(name)
    module = xcomp.compile(path, input_shapes=shapes)
    got = list(module.run(inputs).values())
    ref = ort_run(path, inputs)
    assert len(got) == len(ref) == len(torch_outputs)
    for i, (g, want, from_torch) in enumerate(zip(got, ref, torch_outputs)):
        np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}: output {i} vs onnxruntime")
        # The oracle itself agrees with the model it was exported from (a sanity check on the corpus).
        np.testing.assert_allclose(want, from_torch, rtol=RTOL, atol=ATOL, err_msg=f"{name}: ort vs torch")


def _other_inputs(name, inputs, shapes, batch, seq, seed=0):
    """Inputs of another batch / sequence length than the export's, from the same distribution."""
    rng = np.random.default_rng(seed)
    family = _family(name)
    dyn = {"lstm": {"x": (0, 1), "h0": (1,), "c0": (1,)}, "gru": {"x": (1, 0)}}.get(family)
    out = {}
    for key, value in inputs.items():
        shape = list(shapes[key])
        if dyn is not None:  # recurrent inputs: batch/seq sit at different axes
            for axis, size in zip(dyn[key], (batch, seq)):
                shape[axis] = size
        else:
            shape[0] = batch
            if family not in ("mobilenet", "unet"):  # [batch, seq, ...]
                shape[1] = seq
        if value.dtype == np.int64 and key == "input_ids":
            out[key] = rng.integers(0, int(value.max()) + 1, size=shape, dtype=np.int64)
        elif value.dtype == np.int64 or value.dtype == np.bool_:  # masks: pad the tail of the first row
            keep = np.ones(shape, bool)
            keep[0, -2:] = False
            out[key] = keep.astype(np.int64) if value.dtype == np.int64 else ~keep
        else:
            out[key] = rng.standard_normal(shape).astype(value.dtype)
    return out


_SLOW_OTHER_SHAPES = {"encoder_op13", "decoder_op14", "torch_transformer_op18", "mobilenet_op16"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow] if n in _SLOW_OTHER_SHAPES else [])
    for n in ["encoder_op13", "encoder_op18", "decoder_op14", "torch_transformer_op18", "mobilenet_op16",
              "lstm_op18", "gru_op13"]])
def test_user_model_at_other_shapes(name):
    """The exporters trace at one size; a model bound to another batch and sequence length must not carry the
    traced sizes along (a Reshape or Expand frozen to them)."""
    path, inputs, _, shapes = _load(name)
    new_inputs = _other_inputs(name, inputs, shapes, batch=3, seq=5)
    module = xcomp.compile(path, input_shapes={k: v.shape for k, v in new_inputs.items()})
    got = list(module.run(new_inputs).values())
    for i, (g, want) in enumerate(zip(got, ort_run(path, new_inputs))):
        np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}: output {i}")


# Kept symbolic (no input_shapes), a model must either serve other sizes exactly as onnxruntime does or refuse at
# compile time naming the node: never answer for a size it cannot serve.
_SYMBOLIC_REFUSED = {
    # GRU/LSTM unroll over the sequence: it must be static
    "gru_op13": "GRU", "gru_op17": "GRU", "gru_op18": "GRU", "lstm_op14": "LSTM", "lstm_op18": "LSTM",
    # the legacy exporter left the traced sequence length (8) in a Reshape target: onnxruntime fails there too
    "torch_transformer_op14": "Reshape", "torch_transformer_op17": "Reshape",
}
_FAST_SYMBOLIC = {"mobilenet_op13", "unet_op18", "torch_transformer_op18", "encoder_op18", "lstm_op18",
                  "torch_transformer_op17"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in _FAST_SYMBOLIC else [pytest.mark.slow])
                                  for n in MODELS])
def test_user_model_kept_symbolic(name):
    path, inputs, _, shapes = _load(name)
    if name in _SYMBOLIC_REFUSED:
        with pytest.raises(xcomp.UnsupportedOpError, match=rf"\({_SYMBOLIC_REFUSED[name]}, opset"):
            xcomp.compile(path)
        return
    assert_matches_ort(xcomp.compile(path), path, _other_inputs(name, inputs, shapes, batch=3, seq=5))


# -- recurrent ops beyond what torch writes ------------------------------------------------------------------


def _recurrent_model(op, direction="forward", layout=0, seq=5, batch=3, inp=4, hidden=6, with_bias=True,
                     seq_lens=False, initial=True, peepholes=False, **attrs):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.5, "W"),
             numpy_helper.from_array(rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5,
                                     "R")]
    names = ["X", "W", "R"]
    if with_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32),
                                             "B"))
    names.append("B" if with_bias else "")
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if seq_lens:
        graph_inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
        feeds["L"] = rng.integers(1, seq + 1, size=batch).astype(np.int32)
        feeds["L"][0] = seq
    names.append("L" if seq_lens else "")
    state_names = ["H0", "C0"] if op == "LSTM" else ["H0"]
    for s in state_names:
        if initial:
            graph_inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, state_shape))
            feeds[s] = rng.standard_normal(state_shape).astype(np.float32)
        names.append(s if initial else "")
    if peepholes:
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 3 * hidden)).astype(np.float32), "P"))
        names.append("P")
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, outs, name=f"my_{op.lower()}", direction=direction, hidden_size=hidden,
                            **({"layout": layout} if layout else {}), **attrs)
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    graph_outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)] + [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, state_shape) for o in outs[1:]]
    return make_model([node], graph_inputs, graph_outputs, inits, opset=14), feeds


RECURRENT_CASES = {
    "lstm_seq_lens_bidirectional": dict(op="LSTM", direction="bidirectional", seq_lens=True),
    "lstm_peepholes_clip_reverse": dict(op="LSTM", direction="reverse", peepholes=True, clip=0.7),
    "lstm_input_forget_layout1": dict(op="LSTM", layout=1, input_forget=1, initial=False),
    "lstm_activations": dict(op="LSTM", direction="bidirectional", activations=["HardSigmoid", "LeakyRelu",
                             "Softsign", "Sigmoid", "ScaledTanh", "Tanh"], activation_alpha=[0.3, 0.05, 0.8],
                             activation_beta=[0.4, 1.2]),
    "gru_reset_after_seq_lens": dict(op="GRU", linear_before_reset=0, seq_lens=True, direction="reverse"),
    "gru_linear_before_reset_layout1": dict(op="GRU", linear_before_reset=1, layout=1, direction="bidirectional"),
    "gru_no_bias_clip": dict(op="GRU", with_bias=False, clip=0.5, initial=False),
    "rnn_relu_seq_lens": dict(op="RNN", activations=["Relu", "Relu"], seq_lens=True, direction="bidirectional"),
}


@pytest.mark.parametrize("case", sorted(RECURRENT_CASES))
def test_recurrent_variant_matches_onnxruntime(case):
    model, feeds = _recurrent_model(**RECURRENT_CASES[case])
    module = xcomp.compile(model)
    got = list(module.run(feeds).values())
    if RECURRENT_CASES[case].get("layout"):  # onnxruntime has no layout=1: run its layout-0 twin, transposed
        twin, _ = _recurrent_model(**dict(RECURRENT_CASES[case], layout=0))
        ref = ort_run(twin, {k: v if k == "L" else v.transpose(1, 0, 2) for k, v in feeds.items()})
        ref = [ref[0].transpose(2, 0, 1, 3)] + [r.transpose(1, 0, 2) for r in ref[1:]]
    else:
        ref = ort_run(model, feeds)
    assert len(got) == len(ref)
    for name, g, want in zip(["Y", "Y_h", "Y_c"], got, ref):
        np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, err_msg=f"{case}: {name}")


def test_recurrent_converter_failure_names_the_node():
    model, _ = _recurrent_model("LSTM", activations=["Sigmoid", "Tanh", "NoSuchActivation"])
    with pytest.raises(xcomp.UnsupportedOpError, match=r"my_lstm \(LSTM, opset 14\).*NoSuchActivation") as info:
        xcomp.compile(model)
    assert info.value.nodes == [("my_lstm", "LSTM", 14)]


# -- Gather on runtime indices ---------------------------------------------------------------------------------


def _embedding_model(vocab=10, dim=4, computed=False, dtype=TensorProto.INT64, name="lookup"):
    """ids -> Gather into a [vocab, dim] table; `computed`: the indices are ids + 0, computed in the graph, so
    no input check can see them before the kernel does."""
    table = numpy_helper.from_array(np.arange(vocab * dim, dtype=np.float32).reshape(vocab, dim), "table")
    nodes, inits, indices = [], [table], "ids"
    if computed:
        zero = np.zeros((), helper.tensor_dtype_to_np_dtype(dtype))
        inits.append(numpy_helper.from_array(zero, "zero"))
        nodes.append(helper.make_node("Add", ["ids", "zero"], ["ids0"]))
        indices = "ids0"
    nodes.append(helper.make_node("Gather", ["table", indices], ["emb"], name=name))
    return make_model(nodes, [helper.make_tensor_value_info("ids", dtype, [2, 3])],
                      [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [2, 3, dim])], inits)


def _run_checks(model):
    """The run-time checks (assert ops) the imported main makes."""
    from xcomp.frontends import load_onnx

    return str(load_onnx(model).mod["main"]).count("R.assert_op(")


def test_gather_with_runtime_indices_in_range_and_negative():
    model = _embedding_model()
    ids = np.array([[0, 9, -1], [-10, 4, 5]], np.int64)
    got = xcomp.compile(model).run({"ids": ids})["emb"]
    np.testing.assert_array_equal(got, ort_run(model, {"ids": ids})[0])


@pytest.mark.parametrize("bad", [10, -11, 2**40])
def test_out_of_range_index_input_is_refused_naming_the_gather(bad, tmp_path):
    """onnxruntime raises for an index outside [-vocab, vocab); so does the module, before running, for an input
    that indexes a Gather directly, and after a save/load round trip too."""
    module = xcomp.compile(_embedding_model())
    ids = np.array([[1, 2, 3], [4, bad, 5]], np.int64)
    message = rf"input 'ids': value {bad} at \[1, 1\] is out of range for Gather node 'lookup' .*\[-10, 9\]"
    with pytest.raises(xcomp.InputError, match=message):
        module.run({"ids": ids})
    module.save(tmp_path / "emb.xc")
    with pytest.raises(xcomp.InputError, match=message):
        xcomp.load(tmp_path / "emb.xc")(ids)


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32])
def test_gather_with_computed_indices_in_range_and_negative_matches_onnxruntime(dtype):
    """Indices computed in the graph are checked as the module runs; every in-range one, negative ones included
    (ONNX allows -vocab..vocab-1), gives onnxruntime's exact rows."""
    model = _embedding_model(computed=True, dtype=dtype)
    ids = np.array([[0, 9, -1], [-10, 4, -5]], helper.tensor_dtype_to_np_dtype(dtype))
    module = xcomp.compile(model)
    np.testing.assert_array_equal(module.run({"ids": ids})["emb"], ort_run(model, {"ids": ids})[0])
    np.testing.assert_array_equal(module(ids), ort_run(model, {"ids": ids})[0])


@pytest.mark.parametrize("ids, low, high", [([[1, 10, 2], [-11, 3, 1000]], -11, 1000),
                                            ([[1, 2, 2], [3, 3, 10]], 1, 10),
                                            ([[1, 2**40, 2], [-2**40, 3, 4]], -2**40, 2**40)])
def test_computed_out_of_range_index_is_refused_naming_the_gather(ids, low, high, tmp_path):
    """onnxruntime raises for an index outside [-vocab, vocab); so does the module for indices computed in the
    graph, which no input check can see: the Gather takes them memory-safely (NaN rows; 2^40 made TVM's "fast"
    take read far outside the table), then a check after the graph raises, from run() and a call, and after a
    save/load round trip too."""
    model = _embedding_model(computed=True, name="emb_lookup")
    module = xcomp.compile(model)
    ids = np.array(ids, np.int64)
    message = (r"^Gather node 'emb_lookup': index out of range for axis 0 of size 10: indices must lie in "
               rf"\[-10, 9\], got values from {low} to {high}$")
    with pytest.raises(xcomp.InputError, match=message):
        module.run({"ids": ids})
    with pytest.raises(xcomp.InputError, match=message):
        module(ids)
    with pytest.raises(xcomp.InputError, match=message):
        module.benchmark({"ids": ids}, warmup=0, repeat=1)
    module.save(tmp_path / "emb.xc")
    with pytest.raises(xcomp.InputError, match=message):
        xcomp.load(tmp_path / "emb.xc")(ids)
    good = np.array([[0, 9, -1], [-10, 4, 5]], np.int64)  # the module still runs after a refusal
    np.testing.assert_array_equal(module(good), ort_run(model, {"ids": good})[0])


def test_cli_run_refuses_a_computed_out_of_range_index_in_one_line(tmp_path):
    """`xcomp run` prints the check's message as one line and exits 1, no traceback; in a child process, so a
    crash (an out-of-bounds read) shows up as a failure here, not as a dead test session."""
    path = tmp_path / "emb.onnx"
    path.write_bytes(_embedding_model(computed=True, name="emb_lookup").SerializeToString())
    np.save(tmp_path / "ids.npy", np.array([[1, 2**40, 2], [-2**40, 3, 4]], np.int64))
    proc = subprocess.run([sys.executable, "-m", "xcomp", "run", str(path), "--input", f"ids={tmp_path / 'ids.npy'}",
                           "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "error: Gather node 'emb_lookup': index out of range for axis 0 of size 10" in proc.stderr


def test_gather_over_a_symbolic_axis_checks_computed_indices_against_its_size():
    """The axis size known only as the module runs: the check compares with it, and names it."""
    model = make_model(
        [helper.make_node("Add", ["ids", "zero"], ["ids0"]), helper.make_node("Gather", ["x", "ids0"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(np.zeros((), np.int64), "zero")])
    module = xcomp.compile(model)
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    ids = np.array([4, -5, 0], np.int64)
    np.testing.assert_array_equal(module(x, ids), ort_run(model, {"x": x, "ids": ids})[0])
    with pytest.raises(xcomp.InputError, match=r"^Gather node 'y': index out of range for axis 0 of size 5: "
                                               r"indices must lie in \[-size, size - 1\], got values from -5 to 5$"):
        module(x, np.array([5, -5, 0], np.int64))


def test_runtime_index_checks_only_where_no_other_check_sees_the_indices():
    """A check (and its kernels) only for computed indices: none for a graph input (checked before running),
    constant indices (checked as the model imports, over computed data too), or a model without Gather."""
    assert _run_checks(_embedding_model(computed=True)) == 1
    assert _run_checks(_embedding_model()) == 0
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "table")
    index = numpy_helper.from_array(np.array([1, -1], np.int64), "i")
    nodes = [helper.make_node("Add", ["x", "table"], ["s"]), helper.make_node("Gather", ["s", "i"], ["y"])]
    constant = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [table, index])
    assert _run_checks(constant) == 0
    model = xcomp.compile(constant)
    x = np.ones((10, 4), np.float32)
    np.testing.assert_array_equal(model(x), ort_run(constant, {"x": x})[0])
    bad = numpy_helper.from_array(np.array([1, -11], np.int64), "i")
    with pytest.raises(xcomp.UnsupportedOpError, match=r"Gather.*constant index -11 is out of range for axis 0 of "
                                                       r"size 10: indices must lie in \[-10, 9\]"):
        xcomp.compile(make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 4])],
                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [table, bad]))
    no_gather = make_model([helper.make_node("Relu", ["x"], ["y"])],
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    assert _run_checks(no_gather) == 0


# -- Slice before opset 10 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset, attrs, expected", [
    (6, dict(starts=[1], ends=[3], axes=[1]), lambda x: x[:, 1:3]),
    (9, dict(starts=[0, -3], ends=[1, 2**63 - 1]), lambda x: x[0:1, -3:]),  # no axes: the first two; INT64_MAX
])
def test_slice_with_attributes_before_opset_10(opset, attrs, expected):
    """Slice-1 takes starts/ends/axes as attributes (TVM's converter reads inputs only and failed on every
    such model, e.g. pytorch-operator/test_operator_index)."""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    want = expected(x)
    model = make_model([helper.make_node("Slice", ["x"], ["y"], **attrs)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))], opset=opset)
    np.testing.assert_array_equal(xcomp.compile(model).run({"x": x})["y"], want)
    np.testing.assert_array_equal(ort_run(model, {"x": x})[0], want)


# -- PRelu ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, slope_shape, opset", [((2, 3, 4), (3,), 6), ((2, 3, 4, 5), (3,), 6),
                                                       ((2, 3, 4, 5), (3, 1, 1), 13), ((2, 3, 4, 5), (5,), 13)])
def test_prelu_slope_broadcasts_as_onnx_says(shape, slope_shape, opset):
    """Before opset 7 a [C] slope runs along the channel axis (torch's nn.PReLU(num_parameters=C) exported so),
    which made TVM's converter assert; from opset 7 it broadcasts the numpy way. (onnxruntime has no PRelu-6:
    the reference is numpy's.)"""
    slope = numpy_helper.from_array(np.linspace(0.1, 0.9, int(np.prod(slope_shape)), dtype=np.float32)
                                    .reshape(slope_shape), "slope")
    model = make_model([helper.make_node("PRelu", ["x", "slope"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [slope], opset=opset)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    values = numpy_helper.to_array(slope)
    if opset < 7:
        values = values.reshape(-1, *[1] * (len(shape) - 2))
    expected = np.where(x < 0, x * values, x)
    np.testing.assert_allclose(xcomp.compile(model).run({"x": x})["y"], expected, rtol=1e-6)
    if opset >= 7:
        np.testing.assert_allclose(expected, ort_run(model, {"x": x})[0], rtol=1e-6)
