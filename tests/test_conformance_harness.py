"""The conformance harness: verdicts per case from isolated processes, a table by op type."""

from __future__ import annotations

from xcomp import conformance


def test_verdicts_and_table():
    cases = [c for c in conformance.collect(["node"], ops={"Relu", "Det"}) if c.name in ("test_relu", "test_det_2d")]
    assert {c.name for c in cases} == {"test_relu", "test_det_2d"}
    results = conformance.run(cases, jobs=2, timeout_s=300, progress=False)
    verdicts = {r["name"]: r for r in results}
    assert verdicts["test_relu"]["xcomp"] == "pass" and verdicts["test_relu"]["onnxruntime"] == "pass"
    assert verdicts["test_det_2d"]["xcomp"] == "unsupported" and "Det" in verdicts["test_det_2d"]["detail"]
    table = conformance.by_op(results)
    assert table["Relu"]["pass"] == 1 and table["Det"]["unsupported"] == 1
    text = conformance.markdown(results)
    assert "| Relu | 1 |" in text and "test_det_2d" in text


def test_a_case_over_its_time_is_a_timeout_not_a_dead_harness():
    cases = [c for c in conformance.collect(["light"]) if c.name == "light_vgg19"]
    results = conformance.run(cases, jobs=1, timeout_s=0.5, progress=False)
    assert results[0]["xcomp"] == "timeout"
