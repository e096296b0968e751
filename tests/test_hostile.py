"""Hostile input: every malformed model ends in a clear XcompError quickly, never a crash, hang or traceback."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xcomp
from conftest import tiny_mlp
from hostile_models import CORPUS, nested_if


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


SEED_MODELS = [tiny_mlp(2).SerializeToString()]


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


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1,
                max_size=6))
def test_fuzzed_model_bytes_end_in_xcomp_error_or_a_module(edits):
    data = _mutate(SEED_MODELS[0], edits)
    try:
        module = xcomp.compile(data)
    except xcomp.XcompError as err:
        assert str(err)  # every error says something
        return
    module.run(module.random_inputs())  # what compiles must also run
