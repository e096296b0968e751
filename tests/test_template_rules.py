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
    (lambda: _conv(["H", "W"]), "conv_unpacked template declined: needs every extent but the batch static"),
    (_int_matmul, "matmul template declined: schedules float32 only"),
])
def test_a_declining_template_is_a_compile_note_and_the_next_rule_schedules(model, note):
    module = xcomp.compile(model())
    assert any(note in line for line in module.info["notes"]), module.info["notes"]
    assert {g.kind for g in module.groups} <= {"conv", "matmul"}


def test_a_template_that_accepts_leaves_no_note():
    assert xcomp.compile(_conv([16, 16]), costmodel=False).info["notes"] == []


def test_a_bug_in_a_template_is_an_internal_error_not_a_slower_fallback(monkeypatch):
    from xcomp.schedules.cpu import conv

    def broken(self, func, ctx):
        raise AttributeError("a typo in the template")

    monkeypatch.setattr(conv.DirectConvTemplate, "__init__", broken)
    with pytest.raises(InternalError, match=r"template for group .*conv.* failed: .*a typo in the template"):
        xcomp.compile(_conv([16, 16]))


def _conv_group(**args):
    """The one conv group of conv_model(**args) (tests/test_cpu_schedules.py), compiled for this CPU."""
    from test_cpu_schedules import conv_model

    (group,) = [g for g in xcomp.compile(conv_model(**args)).groups if g.kind == "conv"]
    return group


# a conv of each form, as conv_model's arguments, and the rule that schedules it
CONV_FORMS = {
    "winograd": dict(c_in=64, c_out=64, size=14, kernel=3, pad=1),
    "conv_blocked": dict(c_in=32, c_out=32, size=10, kernel=1),
    "conv_packed": dict(c_in=16, c_out=32, size=8, kernel=3, pad=1, group=2),
    # 20 channels: no whole vectors of 8 or 16 lanes, so NCHW around it; 32 make whole vectors: blocked
    "conv_depthwise": dict(c_in=20, c_out=20, size=9, kernel=3, pad=1, group=20),
    "conv_depthwise_blocked": dict(c_in=32, c_out=32, size=9, kernel=3, pad=1, group=32),
    # 6 channels per group fill no vector: OIHW weights
    "conv_unpacked": dict(c_in=12, c_out=12, size=8, kernel=1, group=2),
}


@pytest.mark.parametrize("rule_name", list(CONV_FORMS))
def test_each_conv_form_is_claimed_by_its_own_rule_alone(rule_name):
    from xcomp.schedules.cpu import RULES, get_template

    group = _conv_group(**CONV_FORMS[rule_name])
    ctx = get_backend("cpu").schedule_context()
    (rule,) = [rule for rule in RULES[:-1] if rule.claims(group.func, group.kind, ctx)]
    assert rule.name == rule_name
    assert type(get_template(group.func, ctx)) is rule.template


def test_a_depthwise_conv_is_told_by_the_role_annotation_of_its_input_copy_not_by_a_name():
    import tvm
    from tvm import s_tir

    from xcomp.schedules.analysis import DEPTHWISE_INPUT, ROLE, root_blocks, with_role
    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.conv_depthwise import DepthwiseConvTemplate

    group = _conv_group(**CONV_FORMS["conv_depthwise"])
    ctx = get_backend("cpu").schedule_context()
    script = group.func.script()
    copy = with_role(root_blocks(s_tir.Schedule(group.func)), DEPTHWISE_INPUT).name
    renamed = tvm.script.from_source(script.replace(copy, "renamed_copy"))  # the block and its buffer
    assert copy not in renamed.script()
    assert isinstance(get_template(renamed, ctx), DepthwiseConvTemplate)
    unmarked = tvm.script.from_source("\n".join(line for line in script.splitlines() if ROLE not in line))
    assert not isinstance(get_template(unmarked, ctx), DepthwiseConvTemplate)
