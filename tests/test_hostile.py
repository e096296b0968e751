"""Hostile input: every malformed model ends in a clear XcompError quickly, never a crash, hang or traceback."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xcomp
from conftest import tiny_mlp
from dynamic_models import attention, cnn
from hostile_models import CORPUS, nested_if

# Examples per fuzz test: 150 in the fast suite; XCOMP_FUZZ_EXAMPLES=5000 for a longer campaign.
FUZZ_EXAMPLES = int(os.environ.get("XCOMP_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_case_gives_its_error(name):
    factory, error_name, phrase = CORPUS[name]
    model = factory()
    data = model if isinstance(model, bytes) else model.SerializeToString()
    start = time.monotonic()
    with pytest.raises(getattr(xcomp, error_name)) as info:
        xcomp.compile(data)
    assert phrase in str(info.value)
    assert time.monotonic() - start < 30


def test_deeply_nested_subgraphs_compile_and_run():
    model = nested_if(25)
    module = xcomp.compile(model)
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(module(x), [0.0, 2.0])


# an MLP, a conv net and a nested If (each small: a mutant that still parses compiles in well under a second)
SEED_MODELS = [tiny_mlp(2).SerializeToString(), cnn(batch=1, image=8).SerializeToString(),
               nested_if(3).SerializeToString()]


def _mutate(data: bytes, edits) -> bytes:
    buf = bytearray(data)
    for kind, pos, value in edits:
        if not buf:
            break
        i = pos % len(buf)
        if kind == 0:
            buf[i] = value
        elif kind == 1:
            del buf[i: i + 1 + value % 8]
        else:
            buf[i:i] = bytes([value]) * (1 + value % 4)
    return bytes(buf)


@FUZZ
@given(st.sampled_from(range(len(SEED_MODELS))),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1,
                max_size=6))
def test_fuzzed_model_bytes_end_in_xcomp_error_or_a_module(seed_model, edits):
    data = _mutate(SEED_MODELS[seed_model], edits)
    try:
        module = xcomp.compile(data)
    except xcomp.XcompError as err:
        assert str(err)  # every error says something
        return
    module.run(module.random_inputs())  # what compiles must also run


@pytest.fixture(scope="module")
def symbolic_attention():
    """x[batch, seq, 32] and mask[batch, seq, seq], both dims symbolic: the inputs must agree on them."""
    return xcomp.compile(attention())


_DTYPES = ["float32", "float64", "float16", "int64", "int32", "uint8", "bool", "str", "object", "complex64"]


@st.composite
def _input_value(draw):
    """Anything a caller might pass for one input: arrays of any dtype and rank (empty dims too), scalars, None,
    strings, ragged lists."""
    kind = draw(st.sampled_from(["array", "array", "array", "scalar", "none", "text", "ragged"]))
    if kind == "scalar":
        return draw(st.one_of(st.floats(allow_nan=True), st.integers(-5, 5), st.booleans()))
    if kind == "none":
        return None
    if kind == "text":
        return draw(st.text(max_size=8))
    if kind == "ragged":
        return [[1.0, 2.0], [3.0]]
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 32]), max_size=4)))
    dtype = draw(st.sampled_from(_DTYPES))
    if dtype == "str":
        return np.full(shape, "a")
    if dtype == "object":
        return np.empty(shape, dtype=object)
    return np.ones(shape, dtype=dtype)


@st.composite
def _feed(draw):
    """A feed that fits (any batch and sequence, empty ones too), then up to two things done to it: an input
    replaced by anything, an input left out, an input the model does not have."""
    batch, seq = draw(st.sampled_from([0, 1, 2, 3])), draw(st.sampled_from([0, 1, 4]))
    feed = {"x": np.ones((batch, seq, 32), np.float32), "mask": np.zeros((batch, seq, seq), np.float32)}
    for _ in range(draw(st.integers(0, 2))):
        action = draw(st.sampled_from(["replace", "replace", "drop", "extra"]))
        name = draw(st.sampled_from(sorted(feed)))
        if action == "replace":
            feed[name] = draw(_input_value())
        elif action == "drop":
            del feed[name]
        else:
            feed[draw(st.sampled_from(["y", "", "X"]))] = np.ones(1, np.float32)
        if not feed:
            break
    return feed


@FUZZ
@given(_feed())
def test_fuzzed_inputs_end_in_input_error_or_a_result(symbolic_attention, feed):
    """Whatever a caller feeds a compiled module (one attention head, batch and sequence symbolic and shared by
    its two inputs): outputs of the shape the inputs set, or an InputError that says what is wrong."""
    try:
        out = symbolic_attention.run(feed)
    except xcomp.InputError as err:
        assert str(err)
        return
    batch, seq, _ = np.shape(feed["x"])
    assert [o.shape for o in out.values()] == [(batch, seq, 32)]
