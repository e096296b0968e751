"""Schedules of a KV-cache decoding step: the groups over a symbolic cache length (attention's concat, the scores
over K as it is, their softmax) run parallel and vectorized as the length at run time repays, and match
onnxruntime at every length."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model

RTOL, ATOL = 1e-4, 1e-4
HEADS, HEAD_DIM = 12, 64


@pytest.fixture(scope="module")
def backend():
    from xcomp.backends import get_backend

    return get_backend("cpu")


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _inputs(**shapes):
    rng = np.random.default_rng(1)
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


def _scheduled(module, kind, backend):
    """The scheduled PrimFuncs of the module's groups of `kind`."""
    from xcomp.graph.partition import unique_groups
    from xcomp.pipeline import schedule_group

    groups = [rep for rep, _ in unique_groups(module.groups).values() if rep.kind == kind]
    return [schedule_group(group, backend.schedule_context(), None)[0] for group in groups]


def _guards(func) -> list:
    """(then loop, else loop) of every run-time parallel guard (schedules/cpu/guard.py) at the func's top."""
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import IfThenElse, SeqStmt

    body = func.body.block.body if isinstance(func.body, SBlockRealize) else func.body
    stmts = body.seq if isinstance(body, SeqStmt) else [body]
    return [(s.then_case, s.else_case) for s in stmts if isinstance(s, IfThenElse)]


def test_kv_concat_runs_parallel_over_heads_when_the_cache_is_long(backend):
    """The KV concat [1, heads, past, d] + [1, heads, seq, d]: least_iterations counts its symbolic length as 1,
    which left it serial; guarded, it runs over the heads in parallel once the cache holds enough elements, and
    serial for a short one (both paths checked against onnxruntime)."""
    from tvm import s_tir
    from tvm.tirx import ForKind

    node = helper.make_node("Concat", ["past", "new"], ["present"], axis=2)
    inputs = [_value("past", (1, HEADS, "past", HEAD_DIM)), _value("new", (1, HEADS, "seq", HEAD_DIM))]
    model = make_model([node], inputs, [_value("present", (1, HEADS, "total", HEAD_DIM))])
    module = xcomp.compile(model)
    for past, seq in ((0, 1), (3, 2), (200, 1), (0, 128)):
        inputs = _inputs(past=(1, HEADS, past, HEAD_DIM), new=(1, HEADS, seq, HEAD_DIM))
        assert_matches_ort(module, model, inputs, rtol=RTOL, atol=ATOL)
    (func,) = _scheduled(module, "injective", backend)
    (guard,) = _guards(func)
    parallel, serial = guard
    assert parallel.kind == ForKind.PARALLEL and int(parallel.extent) == HEADS  # the symbolic length inside
    assert serial.kind == ForKind.SERIAL
    assert "T.vectorized" in func.script()
    s_tir.Schedule(func)  # well-formed, each copy with its own variables: the cost model reads it so


def test_scores_read_the_cache_as_it_is_packed_only_for_many_query_rows(backend):
    """q k^T over a cache [1, heads, past + seq, d]: one group, no transpose of the cache before it, its scale
    fused (the size `past` it takes as an argument only sizes its buffers). Its schedule chooses at run time: K
    packed for 4 query rows or more, dot products along K's rows for fewer. Specialized to one query row, the
    matmul template leaves it to those dot products. Every path checked against onnxruntime."""
    from tvm import s_tir
    from tvm.tirx import IfThenElse

    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Div", ["scores", "scale"], ["scaled"])]
    model = make_model(nodes, [_value(name, (1, HEADS, dim, HEAD_DIM)) for name, dim in
                               (("q", "seq"), ("past", "past"), ("new", "seq"))],
                       [_value("scaled", (1, HEADS, "seq", "total"))],
                       [numpy_helper.from_array(np.array(8.0, np.float32), "scale")])
    module = xcomp.compile(model)
    assert sorted(g.kind for g in module.groups) == ["injective", "matmul"]  # the concat, then the scores
    for seq, past in ((1, 0), (1, 200), (3, 7), (4, 7), (128, 0)):
        inputs = _inputs(q=(1, HEADS, seq, HEAD_DIM), past=(1, HEADS, past, HEAD_DIM), new=(1, HEADS, seq, HEAD_DIM))
        assert_matches_ort(module, model, inputs, rtol=RTOL, atol=ATOL)
    (func,) = _scheduled(module, "matmul", backend)
    choice = func.body.block.body
    assert isinstance(choice, IfThenElse) and str(choice.condition) == "seq < T.int64(4)", choice.condition
    packed_copy = "_global = T.sblock_alloc_buffer"  # cache_read's name for the packed copy of B
    assert packed_copy in choice.else_case.script() and packed_copy not in choice.then_case.script()
    s_tir.Schedule(func)  # well-formed, each branch with its own block iterators: the cost model reads it so

    one_row = {"q": [1, HEADS, 1, HEAD_DIM], "new": [1, HEADS, 1, HEAD_DIM]}
    module = xcomp.compile(model, input_shapes=one_row)
    (group,) = [g for g in module.groups if g.kind == "matmul"]
    assert "dot products along B's rows" in module.info["schedules"][group.key]["source"]
    for past in (0, 200):
        inputs = _inputs(q=(1, HEADS, 1, HEAD_DIM), past=(1, HEADS, past, HEAD_DIM), new=(1, HEADS, 1, HEAD_DIM))
        assert_matches_ort(module, model, inputs, rtol=RTOL, atol=ATOL)


def test_vocabulary_projection_streams_six_panels_per_tile(backend):
    """A GEMV over a vocabulary (N = 25949 here, 50257 in GPT-2: no vector divides it): its packed panels are
    padded to a multiple of 24, so the register tile may take six panels (six weight streams per core) where
    the 1622 panels' own divisors allowed two. Checked against onnxruntime for a decode step and a prompt."""
    from xcomp.graph.partition import unique_groups
    from xcomp.schedules.cpu.legalize import pack_matmul_weight
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    assert pack_matmul_weight(np.ones((2, 25949), np.float32), 16).shape == (1632, 2, 16)
    assert pack_matmul_weight(np.ones((2, 1001), np.float32), 16).shape == (63, 2, 16)  # 9 more: too many
    k, n = 64, 25949
    weight = np.random.default_rng(0).uniform(-1, 1, (k, n)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_value("x", ("seq", k))],
                       [_value("y", ("seq", n))], [numpy_helper.from_array(weight, "w")])
    module = xcomp.compile(model)
    for seq in (1, 5):
        assert_matches_ort(module, model, _inputs(x=(seq, k)), rtol=RTOL, atol=ATOL)
    (group,) = [rep for rep, _ in unique_groups(module.groups).values() if rep.kind == "matmul"]
    knobs = MatmulTemplate(group.func, backend.schedule_context()).default_knobs()
    assert (knobs["mr"], knobs["nr"]) == (4, 6), knobs
