"""Attention fused into one group (xcomp/graph/attention.py, schedules/cpu/attention.py): long sequences fuse and
match onnxruntime, every config the tuner may try computes the same attention, and what must not fuse stays apart."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _attention_model(heads, rows, keys, depth, logits=("scale", "mask"), probs_out=False,
                     masked=float(np.finfo(np.float32).min)):
    """q [1, H, M, D], k and v [1, H, K, D], mask [1, 1, 1, K]: softmax(logits(q k^T)) v, k transposed by the
    graph as exporters write it; `probs_out` also returns the probabilities. The causal step puts `masked` past
    key m + K - M."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"])]
    inits = []
    last = "s0"
    for n, step in enumerate(logits):
        if step == "scale":
            inits.append(numpy_helper.from_array(np.array(depth ** -0.5, np.float32), "scale"))
            nodes.append(helper.make_node("Div", [last, "scale"], [f"s{n + 1}"]))
        elif step == "cast":  # GPT-2's exporter casts float32 scores and probabilities to float32
            nodes.append(helper.make_node("Cast", [last], [f"s{n + 1}"], to=TensorProto.FLOAT))
        elif step == "causal":  # GPT-2's: where(causal, scores, the float's least value)
            causal = np.tril(np.ones((rows, keys), bool), keys - rows).reshape(1, 1, rows, keys)
            inits += [numpy_helper.from_array(causal, "causal"),
                      numpy_helper.from_array(np.array(masked, np.float32), "least")]
            nodes.append(helper.make_node("Where", ["causal", last, "least"], [f"s{n + 1}"]))
        else:  # the mask on the left: the scores are found on either side of an add
            nodes.append(helper.make_node("Add", ["mask", last], [f"s{n + 1}"]))
        last = f"s{n + 1}"
    nodes.append(helper.make_node("Softmax", [last], ["p"], axis=-1))
    if "cast" in logits:
        nodes.append(helper.make_node("Cast", ["p"], ["p_cast"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("MatMul", ["p_cast" if "cast" in logits else "p", "v"], ["y"]))
    inputs = [_value("q", (1, heads, rows, depth)), _value("k", (1, heads, keys, depth)),
              _value("v", (1, heads, keys, depth))]
    if "mask" in logits:
        inputs.append(_value("mask", (1, 1, 1, keys)))
    outputs = [_value("y", (1, heads, rows, depth))] + ([_value("p", (1, heads, rows, keys))] if probs_out else [])
    return make_model(nodes, inputs, outputs, inits)


def _inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    feed = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feed[value.name] = rng.standard_normal(shape).astype(np.float32)
    if "mask" in feed:  # a padding mask: the last keys masked out, as a tokenizer's padding is
        feed["mask"] = np.where(np.arange(feed["mask"].shape[-1]) < feed["mask"].shape[-1] - 7, 0.0,
                                -1e4).astype(np.float32).reshape(feed["mask"].shape)
    return feed


def _group_names(module):
    return [g.name for g in module.groups]


# 4 heads of 999 x 1000 scores are 16 MB, past the L2 caches of any host CI meets (the fusion's threshold); the
# odd lengths take the key padding and a last task of fewer rows
@pytest.mark.parametrize("logits", [(), ("scale", "mask"), ("mask", "scale"), ("scale", "cast", "causal", "mask")])
def test_long_attention_runs_as_one_group_and_matches_onnxruntime(logits):
    model = _attention_model(heads=4, rows=999, keys=1000, depth=32, logits=logits)
    module = xcomp.compile(model)
    names = _group_names(module)
    assert "attention" in names and not any("softmax" in name for name in names), names
    assert module.info["schedules"][next(g.key for g in module.groups if g.name == "attention")]["source"] == \
        "default"
    assert_matches_ort(module, model, _inputs(model))


def test_short_attention_keeps_its_three_groups():
    """Scores that stay in the caches between the groups (2 x 64 x 64) are not fused."""
    model = _attention_model(heads=2, rows=64, keys=64, depth=16)
    module = xcomp.compile(model)
    assert "attention" not in _group_names(module)
    assert any("softmax" in name for name in _group_names(module))
    assert_matches_ort(module, model, _inputs(model))


def test_attention_whose_probabilities_are_an_output_is_not_fused():
    model = _attention_model(heads=4, rows=999, keys=1000, depth=32, probs_out=True)
    module = xcomp.compile(model)
    assert "attention" not in _group_names(module)
    assert_matches_ort(module, model, _inputs(model))


@pytest.mark.parametrize("keys,padded", [(1500, 1536), (1000, 1024), (197, 224), (128, 128), (64, 64), (77, 96)])
def test_key_padding_whole_vector_pairs_or_fours(keys, padded):
    from xcomp.graph.attention import padded_keys

    assert padded_keys(keys, 16) == padded


@pytest.mark.parametrize("causal", [None, 3])
def test_every_config_the_tuner_may_try_computes_the_same_attention(causal):
    """The default and random configs of the template's space (rows per task, register tiles) on one group, with
    a last task of fewer rows and padded keys, against numpy; causal: keys past query + 3 masked, and skipped."""
    import tvm
    from tvm import te, tirx

    from xcomp.backends import get_backend
    from xcomp.graph.attention import padded_keys
    from xcomp.schedules.cpu.attention import AttentionTemplate, attention_compute

    backend = get_backend("cpu")
    heads, rows, keys, depth = 2, 37, 50, backend.spec.simd_width
    padded = padded_keys(keys, backend.spec.simd_width)
    q = te.placeholder((1, heads, rows, depth), name="q")
    kt = te.placeholder((1, heads, depth, padded), name="kt")
    v = te.placeholder((1, heads, keys, depth), name="v")
    least = float(np.finfo(np.float32).min)

    def logits(score, index):
        if causal is None:
            return score * 0.25
        return tirx.Select(index[-1] <= index[-2] + causal, score * 0.25, tirx.const(least, "float32"))

    out = attention_compute(q, kt, v, keys, logits, causal)
    template = AttentionTemplate(te.create_prim_func([q, kt, v, out]), backend.schedule_context())

    rng = np.random.default_rng(0)
    qv, kv, vv = (rng.standard_normal((1, heads, n, depth)).astype(np.float32) for n in (rows, keys, keys))
    ktv = np.zeros((1, heads, depth, padded), np.float32)
    ktv[..., :keys] = kv.transpose(0, 1, 3, 2)
    scores = qv @ kv.transpose(0, 1, 3, 2) * 0.25
    if causal is not None:
        scores = np.where(np.tril(np.ones((rows, keys), bool), causal), scores, least)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    want = (probs / probs.sum(-1, keepdims=True)) @ vv

    pick = random.Random(0)
    configs = [template.default_knobs()] + [template.sample(pick) for _ in range(4)]
    for knobs in configs:
        assert template.in_space(knobs), knobs
        built = backend.compile(template.schedule(knobs).with_attr("global_symbol", "main"))
        args = [tvm.runtime.tensor(a) for a in (qv, ktv, vv, np.zeros_like(want))]
        built["main"](*args)
        np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-4, atol=1e-5, err_msg=str(knobs))


def _causal_offset(module):
    from tvm import s_tir

    from xcomp.schedules.analysis import root_blocks, with_role
    from xcomp.schedules.cpu.attention import CAUSAL, SCORES

    group = next(g for g in module.groups if g.name == "attention")
    return with_role(root_blocks(s_tir.Schedule(group.func)), SCORES).block.annotations.get(CAUSAL)


@pytest.mark.parametrize("rows,keys,masked,offset", [
    (999, 1000, float(np.finfo(np.float32).min), 1),  # GPT-2's: each task skips the keys past its last row's
    (1000, 999, float(np.finfo(np.float32).min), None),  # the first row sees no key: its softmax is uniform
    (999, 1000, 0.0, None),  # the masked logits are 0, not the least float: their exponentials count
])
def test_causal_masks_let_tasks_skip_the_keys_their_rows_never_see(rows, keys, masked, offset):
    """Where the causal mask zeroes every exponential past key m + offset, each task bounds its loops over keys
    to those its rows see; where it does not, nothing is skipped. Both match onnxruntime."""
    model = _attention_model(heads=4, rows=rows, keys=keys, depth=32, logits=("scale", "causal", "mask"),
                             masked=masked)
    module = xcomp.compile(model)
    assert _causal_offset(module) == offset
    assert_matches_ort(module, model, _inputs(model))


def test_few_query_rows_are_left_to_the_matmul_template():
    """A decode step's one or two query rows read k in dot products along its rows (the matmul template): the
    attention template declines them, and the graph pass does not fuse them."""
    from tvm import te

    from xcomp.backends import get_backend
    from xcomp.schedules import Declined
    from xcomp.schedules.cpu.attention import MIN_ROWS, AttentionTemplate, attention_compute

    backend = get_backend("cpu")
    lanes = backend.spec.simd_width
    q = te.placeholder((1, 2, MIN_ROWS - 1, lanes), name="q")
    kt = te.placeholder((1, 2, lanes, 4 * lanes), name="kt")
    v = te.placeholder((1, 2, 4 * lanes, lanes), name="v")
    func = te.create_prim_func([q, kt, v, attention_compute(q, kt, v, 4 * lanes, lambda score, index: score)])
    with pytest.raises(Declined, match="query rows"):
        AttentionTemplate(func, backend.schedule_context())
