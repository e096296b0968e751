"""The conformance harness: verdicts per case from isolated processes, a table by op type."""

from __future__ import annotations

from xcomp import conformance


def test_verdicts_and_table():
    names = ("test_relu", "test_det_2d", "test_reduce_sum_do_not_keepdims_example")
    cases = [c for c in conformance.collect(["node"], ops={"Relu", "Det", "ReduceSum"}) if c.name in names]
    assert {c.name for c in cases} == set(names)
    results = conformance.run(cases, jobs=2, timeout_s=300, progress=False)
    verdicts = {r["name"]: r for r in results}
    assert verdicts["test_relu"]["xcomp"] == "pass" and verdicts["test_relu"]["onnxruntime"] == "pass"
    assert "fixed_inputs" not in verdicts["test_relu"]
    # its axes are a graph input: fixed from the case's data, as a user would with --input-value, and said so
    reduce_sum = verdicts["test_reduce_sum_do_not_keepdims_example"]
    assert reduce_sum["xcomp"] == "pass" and reduce_sum["fixed_inputs"] == ["axes"]
    assert conformance.summary(results)["xcomp_pass_with_fixed_inputs"] == 1
    assert verdicts["test_det_2d"]["xcomp"] == "unsupported" and "Det" in verdicts["test_det_2d"]["detail"]
    table = conformance.by_op(results)
    assert table["Relu"]["pass"] == 1 and table["Det"]["unsupported"] == 1
    text = conformance.markdown(results)
    assert "| Relu | 1 |" in text and "test_det_2d" in text


def test_a_case_over_its_time_is_a_timeout_not_a_dead_harness():
    cases = [c for c in conformance.collect(["light"]) if c.name == "light_vgg19"]
    results = conformance.run(cases, jobs=1, timeout_s=0.5, progress=False)
    assert results[0]["xcomp"] == "timeout"
