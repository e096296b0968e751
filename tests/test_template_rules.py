"""Template dispatch (schedules/rules.py): one ordered rule list per family, a decline noted, a bug never swallowed."""

from __future__ import annotations

import numpy as np
import pytest

import xcomp
from conftest import make_model
from xcomp.backends import get_backend
from xcomp.errors import InternalError


def _conv(spatial):
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32), "W")
    return make_model([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1] * 4)],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, *spatial])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, *spatial])], [weight])


def _int_matmul():
    from onnx import TensorProto, helper

    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.INT32, [4, 8]),
                       helper.make_tensor_value_info("w", TensorProto.INT32, [8, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 4])])


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_every_family_ends_with_a_rule_that_claims_any_group(target):
    from xcomp import schedules
    from xcomp.schedules.rules import any_group

    family = schedules._family(get_backend(target).spec)
    assert family.RULES[-1].claims is any_group
    assert len({rule.name for rule in family.RULES}) == len(family.RULES)


@pytest.mark.parametrize("model,note", [
    (lambda: _conv(["H", "W"]), "conv template declined: needs every extent but the batch static"),
    (_int_matmul, "matmul template declined: schedules float32 only"),
])
def test_a_declining_template_is_a_compile_note_and_the_next_rule_schedules(model, note):
    module = xcomp.compile(model())
    assert any(note in line for line in module.info["notes"]), module.info["notes"]
    assert {g.kind for g in module.groups} <= {"conv", "matmul"}


def test_a_template_that_accepts_leaves_no_note():
    assert xcomp.compile(_conv([16, 16])).info["notes"] == []


def test_a_bug_in_a_template_is_an_internal_error_not_a_slower_fallback(monkeypatch):
    from xcomp.schedules.cpu import conv

    def broken(self, func, ctx):
        raise AttributeError("a typo in the template")

    monkeypatch.setattr(conv.ConvTemplate, "__init__", broken)
    with pytest.raises(InternalError, match=r"template for group .*conv.* failed: .*a typo in the template"):
        xcomp.compile(_conv([16, 16]))
