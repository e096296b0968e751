"""A sample of ONNX backend node tests across op families: one case per op type at opsets 7..22, and one per op
version opsets 23..28 changed or brought, compiled and compared with the expected outputs shipped in the onnx
package.

Ops whose first case xcomp refuses are listed below; issue #6 (conformance) works them down.
"""

from __future__ import annotations

import numpy as np
import pytest

import xcomp
from xcomp.tools.conformance import compile_as_user

_OPSET_RANGE = (7, 22)

# First op of cases that xcomp refuses with an UnsupportedOpError naming the node at fault (a missing or failing
# converter in TVM's importer, a Loop or SequenceMap it cannot unroll, a sequence input). Inputs that set shapes
# are fixed from the case's data first, as a user fixes them with --input-value.
UNSUPPORTED_OPS = {
    "Bernoulli", "BlackmanWindow", "ConvInteger", "DeformConv", "Det",
    "HammingWindow", "HannWindow", "ImageDecoder", "MaxUnpool",
    "MelWeightMatrix", "QLinearConv", "RandomUniformLike",
    "RegexFullMatch", "SequenceInsert", "SequenceLength", "SequenceMap",
    "StringConcat", "StringNormalizer", "StringSplit",
}

def _opset(case):
    return max([o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")] or [0])


def _sample():
    import onnx.backend.test.case.node as node

    with np.errstate(all="ignore"):  # some case generators compute inf/nan on purpose
        cases = node.collect_testcases(None)
    first = {}
    for case in sorted(cases, key=lambda c: c.name):
        op = case.model.graph.node[0].op_type
        if _OPSET_RANGE[0] <= _opset(case) <= _OPSET_RANGE[1]:
            first.setdefault(op, case)
    return first


SAMPLE = _sample()


# Cases of opsets 23..28, one per op version those opsets changed or brought, that xcomp converts (the full run,
# `xcomp conformance --set node`, covers the rest).
NEW_OPSET_CASES = (
    "test_attention_3d_gqa_causal", "test_attention_4d_causal_nonpad_batch_prefill",
    "test_attention_local_window_with_past", "test_rms_normalization_4d_axis0", "test_rotary_embedding_interleaved",
    "test_tensorscatter_circular", "test_swish", "test_swiglu", "test_cumprod_2d_axis_1",
    "test_bitshift_right_int8_negative_shift", "test_mod_float_edge_cases_fmod_0_float32",
    "test_spacetodepth_crd_mode_example", "test_causal_conv_with_state_silu_with_past_state",
    "test_bitcast_float32_to_int32", "test_transpose_default", "test_top_k_smallest",
)


def _new_opset_cases():
    import onnx.backend.test.case.node as node

    with np.errstate(all="ignore"):
        return {c.name: c for c in node.collect_testcases(None) if c.name in NEW_OPSET_CASES}


NEW_CASES = _new_opset_cases()


def test_sample_spans_op_families():
    assert len(SAMPLE) >= 140
    supported = [op for op in SAMPLE if op not in UNSUPPORTED_OPS]
    assert len(supported) >= 110


@pytest.mark.parametrize("op", sorted(SAMPLE))
def test_node_case(op):
    case = SAMPLE[op]
    inputs, expected = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feed = dict(zip(names, inputs))
    if op in UNSUPPORTED_OPS:
        with pytest.raises(xcomp.UnsupportedOpError) as info:
            compile_as_user(case.model, feed)
        assert info.value.nodes and "opset" in str(info.value)
        return
    module, _fixed = compile_as_user(case.model, feed)  # shape-setting inputs fixed from the data, as a user must
    got = module.run(feed)
    for (name, g), want in zip(got.items(), expected):
        np.testing.assert_allclose(g, want, rtol=max(case.rtol, 1e-3), atol=max(case.atol, 1e-4),
                                   err_msg=f"{case.name}: output {name}")


@pytest.mark.parametrize("name", NEW_OPSET_CASES)
def test_new_opset_case(name):
    case = NEW_CASES[name]
    assert _opset(case) >= 23
    inputs, expected = case.data_sets[0]
    feed = dict(zip([i.name for i in case.model.graph.input], inputs))
    module, _fixed = compile_as_user(case.model, feed)
    for (output, got), want in zip(module.run(feed).items(), expected):
        np.testing.assert_allclose(got, want, rtol=max(case.rtol, 1e-3), atol=max(case.atol, 1e-4),
                                   err_msg=f"{name}: output {output}")
