"""Bad input of every kind ends in a clear XcompError naming what is wrong, never a traceback."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xcomp
from conftest import make_model, tiny_mlp


def test_missing_file(tmp_path):
    with pytest.raises(xcomp.ModelLoadError, match="no such file"):
        xcomp.compile(str(tmp_path / "nope.onnx"))


def test_not_an_onnx_file(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a protobuf, just some text\n" * 10)
    with pytest.raises(xcomp.ModelLoadError, match="notes.onnx"):
        xcomp.compile(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(xcomp.ModelLoadError, match="empty"):
        xcomp.compile(str(path))


def test_truncated_model(tmp_path):
    data = tiny_mlp(2).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(xcomp.ModelLoadError, match="cut.onnx"):
        xcomp.compile(str(path))


def test_every_unsupported_node_is_listed():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("FrobnicateA", ["a"], ["b"], name="first_bad", domain="com.example"),
        helper.make_node("TotallyUnknownOp", ["b"], ["y"], name="second_bad"),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(xcomp.UnsupportedOpError) as info:
        xcomp.compile(model.SerializeToString())
    err = info.value
    assert [n[:2] for n in err.nodes] == [("first_bad", "com.example.FrobnicateA"), ("second_bad", "TotallyUnknownOp")]
    assert "first_bad" in str(err) and "second_bad" in str(err) and "opset 17" in str(err)


def test_sequence_output_is_refused_naming_its_node():
    """A module returns tensors; a sequence output used to come back flattened into them."""
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2])
    model = make_model([helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="pack")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [seq])
    with pytest.raises(xcomp.UnsupportedOpError) as info:
        xcomp.compile(model)
    assert info.value.nodes == [("pack", "SequenceConstruct", 17)]
    assert str(info.value) == ("output 'seq' is a sequence: xcomp modules take and return numeric tensors only "
                               "(1 unsupported node(s): pack (SequenceConstruct, opset 17))")


def test_string_input_is_refused_naming_its_node():
    model = make_model([helper.make_node("Equal", ["s", "t"], ["y"], name="same")],
                       [helper.make_tensor_value_info(n, TensorProto.STRING, [2]) for n in "st"],
                       [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])], opset=19)
    with pytest.raises(xcomp.UnsupportedOpError, match="input 's' is a string tensor; input 't' is a string tensor"):
        xcomp.compile(model)


def test_cyclic_graph():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    with pytest.raises(xcomp.ModelLoadError, match="invalid ONNX model"):
        xcomp.compile(model)


def test_opset_out_of_range():
    model = tiny_mlp(2)
    model.opset_import[0].version = 30  # newer than anything this importer knows
    with pytest.raises(xcomp.ModelLoadError, match="opset 30 is outside the supported range"):
        xcomp.compile(model)


def test_external_data_escaping_the_model_folder(tmp_path):
    model = tiny_mlp(2)
    weights = model.graph.initializer[0]
    weights.ClearField("raw_data")
    weights.data_location = TensorProto.EXTERNAL
    weights.external_data.add(key="location", value="../../etc/passwd")
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(xcomp.ModelLoadError, match="outside the model's folder"):
        xcomp.compile(str(path))


def test_external_data_inside_the_folder_loads(tmp_path):
    model = tiny_mlp(2)
    folder = tmp_path / "m"
    folder.mkdir()
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (folder / "weights.bin").exists()
    m = xcomp.compile(str(folder / "model.onnx"))
    x = np.ones((2, 8), np.float32)
    from conftest import ort_run

    np.testing.assert_allclose(m(x), ort_run(str(folder / "model.onnx"), {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_unknown_target():
    with pytest.raises(xcomp.TargetError, match="unknown target 'tpu'"):
        xcomp.compile(tiny_mlp(2), target="tpu")


def test_unknown_cpu_name():
    with pytest.raises(xcomp.TargetError, match="unknown CPU"):
        xcomp.compile(tiny_mlp(2), target="cpu:pentium9000")


def test_input_shape_for_unknown_input():
    with pytest.raises(xcomp.InputError, match="names 'y'"):
        xcomp.compile(tiny_mlp("N"), input_shapes={"y": (1, 8)})


def test_dynamic_dim_bound_by_user():
    m = xcomp.compile(tiny_mlp("N"), input_shapes={"x": (3, 8)})
    assert m.inputs[0].shape == (3, 8)
    assert m(np.zeros((3, 8), np.float32)).shape == (3, 4)


def test_wrong_input_name_shape_dtype(tiny_module):
    module, _ = tiny_module
    good = np.zeros((2, 8), np.float32)
    with pytest.raises(xcomp.InputError, match="unknown input 'z'"):
        module(z=good)
    with pytest.raises(xcomp.InputError, match=r"input 'x': expected shape \[2, 8\], got \[2, 9\]"):
        module(np.zeros((2, 9), np.float32))
    with pytest.raises(xcomp.InputError, match="input 'x': expected dtype float32, got float64"):
        module(np.zeros((2, 8), np.float64))
    with pytest.raises(xcomp.InputError, match="missing input"):
        module()
    with pytest.raises(xcomp.InputError, match="takes 1 input"):
        module(good, good)


def test_errors_share_one_family():
    for cls in (xcomp.ModelLoadError, xcomp.UnsupportedOpError, xcomp.InputError, xcomp.TargetError,
                xcomp.ArtifactError, xcomp.InternalError):
        assert issubclass(cls, xcomp.XcompError)
