"""The conformance harness: verdicts per case from isolated processes, a table by op type."""

from __future__ import annotations

from xcomp.tools import conformance


def test_verdicts_and_table():
    names = ("test_relu", "test_det_2d", "test_reduce_sum_do_not_keepdims_example", "test_string_concat")
    cases = [c for c in conformance.collect(["node"], ops={"Relu", "Det", "ReduceSum", "StringConcat"})
             if c.name in names]
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
    # onnxruntime passes it, xcomp refuses it by name, and it is listed with its reason: a known gap
    strings = verdicts["test_string_concat"]
    assert strings["onnxruntime"] == "pass" and strings["xcomp"] == "unsupported"
    assert "string" in strings["known_gap"] and "StringConcat" in strings["detail"]
    summary = conformance.summary(results)
    assert "Det" in verdicts["test_det_2d"]["known_gap"]  # every opset is held to the bar: Det's is 22
    assert summary["known_gaps"] == 2 and summary["unexplained"] == [] and summary["known_gaps_now_passing"] == []
    table = conformance.by_op(results)
    assert table["Relu"]["pass"] == 1 and table["Det"]["unsupported"] == 1
    text = conformance.markdown(results)
    assert "| Relu | 1 |" in text and "test_det_2d" in text and "2 are known gaps" in text
    assert "| node | test_string_concat | unsupported | pass | string tensors:" in text


def _result(name, xcomp, ort="pass", opset=13, **extra):
    return {"set": "node", "name": name, "op": "Op", "opset": opset, "xcomp": xcomp, "onnxruntime": ort, **extra}


def test_summary_separates_known_gaps_from_failures_it_cannot_explain():
    results = [
        _result("test_a", "pass"),
        _result("test_b", "wrong"),  # onnxruntime passes, xcomp is wrong, not listed: unexplained
        _result("test_c", "unsupported", known_gap="why c fails"),
        _result("test_d", "pass", known_gap="why d failed"),  # listed, but passes now
        _result("test_e", "error", opset=23),  # every opset is held to the bar
        _result("test_f", "crash", ort="fail"),  # onnxruntime fails it too
    ]
    s = conformance.summary(results)
    assert (s["onnxruntime_pass"], s["xcomp_pass_where_onnxruntime_passes"], s["known_gaps"]) == (5, 2, 1)
    assert s["unexplained"] == ["test_b", "test_e"] and s["known_gaps_now_passing"] == ["test_d"]
    assert s["by_opset"] == {"13": [2, 4], "23": [0, 1]}
    words = "\n".join(conformance.summary_lines(s))
    assert "1 are known gaps" in words and "2 are not: test_b, test_e" in words and "passing now" in words
    assert "test_d" in words and "13: 2/4, 23: 0/1" in words


def test_every_known_gap_is_a_case_of_the_sets():
    """A misspelt name in the list would excuse nothing and hide nothing: each names a real case."""
    from xcomp.tools.known_gaps import KNOWN_GAPS

    names = {c.name for c in conformance.collect(["node", "simple"])}
    assert set(KNOWN_GAPS) <= names


def test_a_case_over_its_time_is_a_timeout_not_a_dead_harness():
    cases = [c for c in conformance.collect(["light"]) if c.name == "light_vgg19"]
    results = conformance.run(cases, jobs=1, timeout_s=0.5, progress=False)
    assert results[0]["xcomp"] == "timeout"
