"""Scan, Loop and SequenceMap with a count known at import time, unrolled at the ONNX level
(frontends/control_flow.py) and checked against onnxruntime; and the ones that cannot be, refused saying why."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model
from xcomp.frontends.input_values import InputValuesRequired

RNG = np.random.default_rng(0)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _int64(name, value):
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _cumulative_sum_body(shape):
    """(sum_in, next) -> (sum_out, scan_out): a running sum of slices of `shape`."""
    return helper.make_graph([helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
                              helper.make_node("Identity", ["sum_out"], ["scan_out"])],
                             "cumsum", [_vi("sum_in", shape), _vi("next", shape)],
                             [_vi("sum_out", shape), _vi("scan_out", shape)])


@pytest.mark.parametrize("in_axis, in_direction, out_axis, out_direction",
                         [(1, 1, 1, 0), (1, 1, -1, 1), (0, 0, 0, 0), (-2, 0, 0, 1)])
def test_scan_cumulative_sum(in_axis, in_direction, out_axis, out_direction):
    """x[3, 5, 4] scanned along axis 1 (or 0), reversed or not, its running sums stacked along out_axis."""
    shape = [3, 5, 4] if in_axis % 3 == 1 else [5, 3, 4]
    scan = helper.make_node("Scan", ["init", "x"], ["total", "sums"], name="scan", num_scan_inputs=1,
                            body=_cumulative_sum_body([3, 4]), scan_input_axes=[in_axis],
                            scan_input_directions=[in_direction], scan_output_axes=[out_axis],
                            scan_output_directions=[out_direction])
    sums = [3, 4]
    sums.insert(out_axis % 3, 5)
    model = make_model([scan], [_vi("init", [3, 4]), _vi("x", shape)], [_vi("total", [3, 4]), _vi("sums", sums)])
    feed = {"init": RNG.standard_normal((3, 4)).astype(np.float32),
            "x": RNG.standard_normal(shape).astype(np.float32)}
    assert_matches_ort(xcomp.compile(model), model, feed)


def _loop_body(condition_nodes=(), condition="cond_in"):
    """(i, cond_in, y_in) -> (cond_out, y_out, scan_out): y += x * i, with x read from the outer graph."""
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "i_f"], ["step"]),
             helper.make_node("Add", ["y_in", "step"], ["y_out"]),
             helper.make_node("Identity", ["y_out"], ["scan_out"]),
             *condition_nodes,
             helper.make_node("Identity", [condition], ["cond_out"])]
    return helper.make_graph(nodes, "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                                             _vi("y_in", [3])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [3]), _vi("scan_out", [3])])


def _loop_model(body, trip_nodes=(), initializers=(), inputs=()):
    """y, ys = Loop(n, "", y0): trip count `n` (an initializer, an input, or made by `trip_nodes`)."""
    loop = helper.make_node("Loop", ["n", "", "y0"], ["y", "ys"], name="loop", body=body)
    return make_model([*trip_nodes, loop], [_vi("x", [3]), _vi("y0", [3]), *inputs],
                      [_vi("y", [3]), _vi("ys", ["steps", 3])], list(initializers))


def _loop_feed():
    return {"x": RNG.standard_normal(3).astype(np.float32), "y0": RNG.standard_normal(3).astype(np.float32)}


def test_loop_with_constant_trip_count_and_scan_output():
    model = _loop_model(_loop_body(), initializers=[_int64("n", 4)])
    assert_matches_ort(xcomp.compile(model), model, _loop_feed())


def test_loop_trip_count_folded_from_a_static_shape():
    """The trip count is Shape(x)[0]: constant once the folding passes ran."""
    trip_nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                  helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0)]
    model = _loop_model(_loop_body(), trip_nodes, initializers=[_int64("zero", 0)])
    assert_matches_ort(xcomp.compile(model), model, _loop_feed())


def test_loop_that_exits_early_on_its_iteration_number():
    """cond_out = i < 2 with a trip count of 10: three iterations run, and the scan output has three rows."""
    less = [helper.make_node("Less", ["i", "two"], ["go_on"])]
    model = _loop_model(_loop_body(less, "go_on"), initializers=[_int64("n", 10), _int64("two", 2)])
    module = xcomp.compile(model)
    assert module.outputs[1].shape == (3, 3)
    assert_matches_ort(module, model, _loop_feed())


def test_loop_trip_count_from_an_input_is_asked_for():
    model = _loop_model(_loop_body(), inputs=[_vi("n", [], TensorProto.INT64)])
    with pytest.raises(InputValuesRequired, match="input 'n' is the 'M' of Loop node loop"):
        xcomp.compile(model)
    feed = {**_loop_feed(), "n": np.array(3, np.int64)}
    assert_matches_ort(xcomp.compile(model, input_values={"n": 3}), model, feed)


def test_loop_with_a_computed_trip_count_is_refused_saying_why():
    """The trip count is computed from x's values: known only at run time."""
    trip_nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                  helper.make_node("Cast", ["total"], ["n"], to=TensorProto.INT64)]
    model = _loop_model(_loop_body(), trip_nodes)
    with pytest.raises(xcomp.UnsupportedOpError) as info:
        xcomp.compile(model)
    assert info.value.nodes == [("loop", "Loop", 17)]
    assert str(info.value) == ("1 unsupported node(s): loop (Loop, opset 17): cannot unroll it: its trip count 'n' "
                               "is not a constant")


def test_loop_whose_condition_reads_its_state_is_refused_saying_why():
    positive = [helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                helper.make_node("Greater", ["total", "zero"], ["go_on"])]
    model = _loop_model(_loop_body(positive, "go_on"), initializers=[_int64("n", 4),
                                                                     numpy_helper.from_array(np.float32(0), "zero")])
    with pytest.raises(xcomp.UnsupportedOpError, match="loop \\(Loop, opset 17\\): cannot unroll it: its condition "
                                                       "is computed from values known only at run time"):
        xcomp.compile(model)


def test_scan_over_a_symbolic_dim_is_refused_saying_how_to_fix_it():
    scan = helper.make_node("Scan", ["init", "x"], ["total", "sums"], name="scan", num_scan_inputs=1,
                            body=_cumulative_sum_body([4]))
    model = make_model([scan], [_vi("init", [4]), _vi("x", ["seq", 4])], [_vi("total", [4]), _vi("sums", ["seq", 4])])
    with pytest.raises(xcomp.UnsupportedOpError, match="scan \\(Scan, opset 17\\): cannot unroll it: its sequence "
                                                       "length \\(dim 0 of 'x'\\) is not static; fix it with "
                                                       "--input-shape"):
        xcomp.compile(model)
    module = xcomp.compile(model, input_shapes={"x": [6, 4]})
    assert_matches_ort(module, model, {"init": np.zeros(4, np.float32),
                                       "x": RNG.standard_normal((6, 4)).astype(np.float32)})


def test_sequence_map_over_split_to_sequence():
    """x split into pieces of 1, 2 and 3 rows, each squared plus w (an input every iteration reads), then
    concatenated back."""
    body = helper.make_graph([helper.make_node("Mul", ["piece", "piece"], ["square"]),
                              helper.make_node("Add", ["square", "w_in"], ["out"])],
                             "body", [_vi("piece", [None, 3]), _vi("w_in", [3])], [_vi("out", [None, 3])])
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["pieces"], axis=0),
             helper.make_node("SequenceMap", ["pieces", "w"], ["mapped"], name="map", body=body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)]
    model = make_model(nodes, [_vi("x", [6, 3]), _vi("w", [3])], [_vi("y", [6, 3])], [_int64("split", [1, 2, 3])])
    feed = {"x": RNG.standard_normal((6, 3)).astype(np.float32), "w": RNG.standard_normal(3).astype(np.float32)}
    assert_matches_ort(xcomp.compile(model), model, feed)


def test_scan_nested_in_a_loop_body():
    """Each of 3 iterations adds the running sums of x's rows (an inner Scan over an outer-scope tensor)."""
    scan = helper.make_node("Scan", ["y_in", "x"], ["y_out", "rows"], num_scan_inputs=1,
                            body=_cumulative_sum_body([3]))
    body = helper.make_graph([scan, helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                             [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("y_in", [3])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [3]), _vi("rows", [4, 3])])
    loop = helper.make_node("Loop", ["n", "", "y0"], ["y", "all_rows"], name="loop", body=body)
    model = make_model([loop], [_vi("x", [4, 3]), _vi("y0", [3])], [_vi("y", [3]), _vi("all_rows", [3, 4, 3])],
                       [_int64("n", 3)])
    feed = {"x": RNG.standard_normal((4, 3)).astype(np.float32), "y0": RNG.standard_normal(3).astype(np.float32)}
    assert_matches_ort(xcomp.compile(model), model, feed)


def test_sequence_map_written_as_a_loop():
    """ONNX's expansion of SequenceMap: a Loop over SequenceLength(seq) that reads SequenceAt(seq, i) and
    SequenceInserts each result; the sequence comes from a SplitToSequence (no keepdims) of a static tensor."""
    body = helper.make_graph(
        [helper.make_node("SequenceAt", ["rows", "i"], ["row"]),
         helper.make_node("Add", ["row", "w"], ["out"]),
         helper.make_node("SequenceInsert", ["acc_in", "out"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         helper.make_tensor_sequence_value_info("acc_in", TensorProto.FLOAT, [3])],
        [_vi("cond_out", [], TensorProto.BOOL), helper.make_tensor_sequence_value_info("acc_out", TensorProto.FLOAT,
                                                                                        [3])])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
             helper.make_node("SequenceLength", ["rows"], ["n"]),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["n", "", "empty"], ["mapped"], name="loop", body=body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0, new_axis=1)]
    model = make_model(nodes, [_vi("x", [4, 3]), _vi("w", [3])], [_vi("y", [4, 3])])
    feed = {"x": RNG.standard_normal((4, 3)).astype(np.float32), "w": RNG.standard_normal(3).astype(np.float32)}
    assert_matches_ort(xcomp.compile(model), model, feed)
