"""Benchmark reports (`xcomp bench --report`, `--results`, `--compare`): JSON schema and content, predicted
numbers labelled, a results file from another machine merged, regressions flagged, tuning curves, and the HTML
page rendering in headless Chromium with its charts and no console errors."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import make_model
from onnx import TensorProto, helper, numpy_helper

import onnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_TARGETS = ("cuda:sm_90", "rocm:gfx942")


def conv_relu_matmul():
    """x[2,3,8,8] -> conv 3x3 (8 filters) -> relu -> flatten -> matmul [288,16]: three tiny operator groups."""
    rng = np.random.default_rng(0)
    wc = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "Wc")
    wm = numpy_helper.from_array(rng.standard_normal((288, 16)).astype(np.float32) * 0.1, "Wm")
    nodes = [
        helper.make_node("Conv", ["x", "Wc"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "Wm"], ["y"], name="matmul"),
    ]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], [wc, wm])


def bench(*args):
    """Run `xcomp bench ...` in this process; returns the exit code."""
    from xcomp.cli import main

    return main(["bench", *args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One report for cpu (measured) and two GPUs (predicted: this machine has none)."""
    from xcomp.report.collect import runs_here

    if any(runs_here(t) for t in GPU_TARGETS):
        pytest.skip("a GPU is present: the predicted-target tests need a machine without one")
    folder = tmp_path_factory.mktemp("report")
    model_path = str(folder / "tiny.onnx")
    onnx.save(conv_relu_matmul(), model_path)
    out = folder / "out"
    argv = [model_path, "-t", "cpu", "-t", GPU_TARGETS[0], "-t", GPU_TARGETS[1], "--baseline", "onnxruntime",
            "--baseline", "torch", "--baseline", "onnxruntime-cuda", "--repeat", "5", "--warmup", "1", "--seed", "3",
            "--report", str(out), "-q"]
    assert bench(*argv) == 0
    with open(out / "report.json") as f:
        report = json.load(f)
    return {"model": model_path, "out": out, "report": report, "argv": argv, "folder": folder}


def target(report, name):
    return next(t for t in report["targets"] if t["target"] == name)


# -- JSON ---------------------------------------------------------------------------------------------------


def test_schema_and_reproducibility(run):
    import tvm

    import xcomp

    r = run["report"]
    assert r["schema_version"] == 1 and r["kind"] == "xcomp-bench-report"
    assert r["command"]["argv"] == ["xcomp", "bench", *run["argv"]]
    assert r["created"] <= r["finished"]
    assert r["settings"]["seed"] == 3 and r["settings"]["repeat"] == 5 and r["settings"]["warmup"] == 1
    assert r["settings"]["targets"] == ["cpu", *GPU_TARGETS]
    assert r["versions"]["xcomp"] == xcomp.__version__ and r["versions"]["tvm"] == tvm.__version__
    assert r["versions"]["onnxruntime"] and r["versions"]["blas"]
    m = r["machine"]
    assert m["cpu_model"] and m["logical_cores"] >= 1 and m["host_spec"]["kind"] == "cpu"
    assert m["host_spec"]["peak_flops"]["float32"] > 0
    with open(run["model"], "rb") as f:
        import hashlib

        assert r["model"]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert r["model"]["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"}]


def test_schema_document_names_every_field(run):
    """docs/report-schema.md documents every key the report writes (top level and per target)."""
    with open(os.path.join(REPO, "docs", "report-schema.md")) as f:
        doc = f.read()
    r = run["report"]
    keys = set(r) | set(target(r, "cpu")) | set(target(r, GPU_TARGETS[0])) | set(target(r, "cpu")["latency"])
    keys |= set(target(r, "cpu")["groups"][0]) | set(target(r, GPU_TARGETS[0])["groups"][0])
    keys |= {k for b in r["baselines"] for k in b} | {k for row in r["blas"] for k in row}
    missing = sorted(k for k in keys if f"`{k}`" not in doc)
    assert not missing, f"undocumented report fields: {missing}"


def test_measured_cpu_target(run):
    cpu = target(run["report"], "cpu")
    assert cpu["status"] == "measured" and cpu["origin"]["kind"] == "this run"
    lat = cpu["latency"]
    assert lat["runs"] == 5 and len(cpu["samples_ms"]) == 5
    # 5 steady runs fit one block of 6 (the default), whose first run followed another runner's block
    assert cpu["latency_after_switch"]["runs"] == 1 and len(cpu["after_switch_samples_ms"]) == 1
    assert run["report"]["settings"]["block"] == 6
    assert 0 < lat["min_ms"] <= lat["median_ms"] <= lat["p90_ms"] <= lat["max_ms"]
    assert lat["spread_pct"] >= 0
    assert cpu["throughput"]["inferences_per_s"] == pytest.approx(1e3 / lat["median_ms"])
    assert cpu["throughput"]["samples_per_s"] == pytest.approx(2e3 / lat["median_ms"])
    first = cpu["first_run"]
    assert first["compile_s"] > 0 and first["total_s"] > first["compile_s"]
    assert cpu["check"]["reference"] == "onnxruntime" and cpu["check"]["max_abs_diff"] < 1e-3
    groups = cpu["groups"]
    assert len(groups) >= 2 and sum(g["share"] for g in groups) == pytest.approx(1.0)
    for g in groups:
        assert g["median_ms"] > 0 and g["count"] >= 1 and g["bytes"] > 0
        assert g["pct_of_roofline"] >= 0 and g["tuned"] is False
    # every group the VM calls was also timed inside whole runs (a reshape the VM runs as a builtin is not)
    assert all(g["in_model_ms"] > 0 for g in groups if g["kind"] in ("matmul", "conv"))
    # shares and rates describe the model's own time: the in-model time, not the group's time alone
    in_model_total = sum(g["in_model_total_ms"] for g in groups)
    for g in groups:
        assert g["rates_from"] == "in_model"
        assert g["share"] == pytest.approx(g["in_model_total_ms"] / in_model_total)
        if g["in_model_ms"]:
            assert g["gflops"] == pytest.approx(g["flops"] / g["in_model_ms"] / 1e6)
            assert g["pct_of_roofline"] == pytest.approx(100 * g["roofline_ms"] / g["in_model_ms"])
    shares = [g["share"] for g in groups]
    assert shares == sorted(shares, reverse=True)
    assert cpu["model_flops"] == sum(g["flops"] * g["count"] for g in groups)
    assert cpu["roofline_bound_predicted_ms"] == pytest.approx(sum(g["roofline_ms"] * g["count"] for g in groups))


def test_group_table_says_a_winograd_group_can_pass_the_peak(run):
    """A Winograd conv states the direct conv's FLOPs, so its rate can pass the peak: the groups table says so when
    the model has one (and only then)."""
    from xcomp.report.tables import group_table

    cpu = target(run["report"], "cpu")
    assert "winograd" not in group_table(cpu).note
    winograd = copy.deepcopy(cpu)
    winograd["groups"][0]["group"] = "fused_conv2d_winograd_add_relu"
    assert "A winograd conv counts the direct conv's FLOPs" in group_table(winograd).note


def test_cpu_rates_are_set_against_roofs_measured_here(run):
    """The spec's peak is nominal (the cpuinfo clock, which turbo exceeds): this run measured the CPU's own, and
    the groups' roofline and the report's text use it."""
    cpu = target(run["report"], "cpu")
    roofs = cpu["roofs"]
    assert roofs["source"] == "measured" and "FMA" in roofs["method"]
    peak, bandwidth = roofs["peak_flops"]["float32"], roofs["mem_bandwidth"]
    # FMA chains held in registers; with the accumulators kept in memory the kernel ran at 6% of the nominal peak
    assert peak > 0.2 * cpu["hardware"]["peak_flops"]["float32"] and bandwidth > 1e8
    for g in cpu["groups"]:
        assert g["roofline_ms"] == pytest.approx(max(g["flops"] / peak, g["bytes"] / bandwidth) * 1e3)
    md = (run["out"] / "report.md").read_text()
    assert "measured fp32 peak" in md


def test_a_rate_is_never_above_the_peak():
    """A runner faster than the measured peak raises it (and the report says by whom); a peak without measured
    roofs to raise is capped at 100% in the table."""
    from xcomp.report.measure import _peak_at_least_every_rate
    from xcomp.report.tables import _rate

    roofs = {"source": "measured", "peak_flops": {"float32": 1e11}, "mem_bandwidth": 2e10}
    entry = {"target": "cpu", "model_flops": 1e9, "latency": {"median_ms": 8.0}}  # 125 GFLOP/s
    baselines = [{"name": "onnxruntime", "device": "cpu", "status": "measured", "latency": {"median_ms": 7.5}},
                 {"name": "torch-cuda", "device": "cuda", "status": "measured", "latency": {"median_ms": 1.0}}]
    raised = _peak_at_least_every_rate(roofs, entry, baselines)
    assert raised["peak_flops"]["float32"] == pytest.approx(1e9 / 7.5e-3)  # onnxruntime's; the GPU's is not a CPU rate
    assert raised["peak_raised_by"] == {"runner": "onnxruntime", "measured_peak": 1e11}
    assert roofs["peak_flops"]["float32"] == 1e11  # the roofs measured stay as they were
    assert _rate(1e9, raised["peak_flops"]["float32"], 7.5) == "133 GFLOP/s (100%)"
    assert _rate(1e9, raised["peak_flops"]["float32"], 8.0) == "125 GFLOP/s (94%)"
    assert "peak_raised_by" not in _peak_at_least_every_rate(roofs, {**entry, "latency": {"median_ms": 20.0}}, [])
    assert _rate(1e9, 1e11, 7.5) == "133 GFLOP/s (100%: above the peak)"


def test_baselines(run):
    baselines = {b["name"]: b for b in run["report"]["baselines"]}
    ort = baselines["onnxruntime"]
    assert ort["status"] == "measured" and ort["latency"]["runs"] == 5 and ort["version"]
    torch = baselines["torch"]
    try:
        import torch as _torch  # noqa: F401

        assert torch["status"] in ("measured", "unavailable")
    except ImportError:
        assert torch["status"] == "not installed"
    if torch["status"] != "measured":
        assert torch["reason"] and "latency" not in torch
    # this machine has no GPU: onnxruntime's CUDA provider is listed with the reason, never timed on the CPU
    ort_cuda = baselines["onnxruntime-cuda"]
    assert ort_cuda["status"] == "unavailable" and ort_cuda["device"] == "cuda" and "latency" not in ort_cuda
    assert "CUDAExecutionProvider" in ort_cuda["reason"]
    with open(run["out"] / "report.md") as f:
        assert re.search(r"\| onnxruntime-cuda \| unavailable \| onnxruntime .* CUDAExecutionProvider", f.read())


def test_a_gpu_provider_that_falls_back_to_the_cpu_is_not_timed_under_its_name(monkeypatch):
    """onnxruntime lists a provider whose libraries are missing, then quietly runs the session on its CPU."""
    import onnxruntime

    from xcomp.report.bench import OnnxRuntimeBaseline, ProviderUnavailable

    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ProviderUnavailable, match="CUDAExecutionProvider did not load"):
        OnnxRuntimeBaseline(conv_relu_matmul().SerializeToString(), "onnxruntime-cuda")
    cpu = OnnxRuntimeBaseline(conv_relu_matmul().SerializeToString())
    assert cpu.device == "cpu" and cpu.session.get_providers() == ["CPUExecutionProvider"]


def test_gemm_groups_against_blas(run):
    r = run["report"]
    matmuls = [g for g in target(r, "cpu")["groups"] if g["kind"] == "matmul"]
    if not matmuls:
        pytest.skip("no group was classified as matmul (schedules/analysis.py)")
    rows = r["blas"]
    assert [row["key"] for row in rows] == [g["key"] for g in matmuls]
    row = rows[0]
    assert row["shape"] == {"batch": 1, "m": 2, "n": 16, "k": 288, "dtype": "float32"}
    assert row["problem"] == "2x288 @ 288x16"
    assert row["blas_ms"] > 0 and row["xcomp_over_blas"] == pytest.approx(row["xcomp_ms"] / row["blas_ms"])


def test_gemm_baseline_is_the_vendor_blas_of_the_targets_hardware():
    """CPU: numpy.matmul, with torch.matmul on the CPU beside it; GPU: torch.matmul on the GPU, cuBLAS or rocBLAS
    (none here: this machine has no GPU, so a GPU target gets no BLAS timing rather than a CPU one)."""
    from xcomp.report.blas import vendor_gemm

    shape = {"batch": 1, "m": 8, "n": 16, "k": 32, "dtype": "float32"}
    name, timing, torch_cpu = vendor_gemm(shape, "cpu", repeat=3)
    assert name == "numpy.matmul" and timing["median_ms"] > 0 and timing["problem"] == "8x32 @ 32x16"
    try:
        import torch
    except ImportError:
        assert torch_cpu is None
    else:
        assert torch_cpu["median_ms"] > 0
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    for kind, blas in (("cuda", "cuBLAS"), ("rocm", "rocBLAS")):
        assert vendor_gemm(shape, kind, repeat=3) == (f"torch.matmul on the GPU ({blas})", None,
                                                                          None)


# -- predicted ----------------------------------------------------------------------------------------------


def test_predicted_targets_are_roofline_and_labelled(run):
    """Each group's roofline bound, and the prediction: the bound itself, or where the target has a calibration
    (fitted to measured runs), a cost per call plus the bound at the fraction of the peak those runs reached."""
    from xcomp.backends import get_backend
    from xcomp.report.predict import calibration

    r = run["report"]
    assert calibration("cuda:sm_90") is not None  # fitted to the H200 runs in benchmarks/results/gpu
    for name in GPU_TARGETS:
        t = target(r, name)
        assert t["status"] == "predicted" and "latency" not in t and "samples_ms" not in t
        spec = get_backend(name).spec
        calibrated = calibration(name)
        total = roofline = 0.0
        for g in t["groups"]:
            assert "median_ms" not in g and g["peak_dtype"] == "float32"
            bound = max(g["flops"] / spec.peak("float32"), g["bytes"] / spec.mem_bandwidth) * 1e3
            assert g["roofline_predicted_ms"] == pytest.approx(bound)
            expected = calibrated["call_ms"] + bound / calibrated["fraction"] if calibrated else bound
            assert g["predicted_ms"] == pytest.approx(expected)
            total += expected * g["count"]
            roofline += bound * g["count"]
        assert t["predicted"]["latency_ms"] == pytest.approx(total) and total > 0
        assert t["predicted"]["roofline_ms"] == pytest.approx(roofline)
        assert "roofline" in t["predicted"]["method"]
        assert ("calibrated" in t["predicted"]["method"]) == (calibrated is not None)


def test_predicted_labelled_in_markdown_and_html(run):
    md = (run["out"] / "report.md").read_text()
    md_rows = [line for line in md.splitlines()
               if line.startswith("|") and any(name in line.split("|")[1] for name in GPU_TARGETS)]
    assert len(md_rows) >= 2
    for line in md_rows:  # every row about a GPU target (first cell), in every table
        assert "predicted" in line, line
    html = (run["out"] / "report.html").read_text()
    rows = re.findall(r"<tr( class=\"[^\"]*\")?>(.*?)</tr>", html, flags=re.S)
    gpu_rows = [(cls, body) for cls, body in rows
                if any(name in body.split("</td>")[0] for name in GPU_TARGETS)]
    assert gpu_rows
    for cls, body in gpu_rows:
        assert "predicted" in cls and "predicted" in body
    for name in GPU_TARGETS:  # the summary cards say so too
        assert re.search(rf"xcomp {re.escape(name)}<span class=\"badge predicted\">predicted", html)


# -- results from another machine ---------------------------------------------------------------------------


def gpu_results_file(run, path):
    """A results file as a GPU machine would write it: this run's CPU measurement re-labelled as cuda:sm_90
    on host 'gpu-box' (test data: there is no GPU here)."""
    from xcomp.backends import get_backend

    doc = copy.deepcopy(run["report"])
    doc["machine"]["hostname"] = "gpu-box"
    gpu = copy.deepcopy(target(doc, "cpu"))
    gpu["target"], gpu["hardware"] = "cuda:sm_90", get_backend("cuda:sm_90").spec.to_dict()
    gpu["origin"]["hostname"] = "gpu-box"
    factor = 0.0123 / gpu["latency"]["median_ms"]  # a faster device: every statistic scaled alike
    gpu["latency"] = {k: v * factor if k.endswith("_ms") else v for k, v in gpu["latency"].items()}
    doc["targets"] = [target(doc, "cpu"), gpu, target(doc, "rocm:gfx942")]
    with open(path, "w") as f:
        json.dump(doc, f)
    return doc


def test_results_file_merges(run):
    results = run["folder"] / "gpu.json"
    gpu_results_file(run, results)
    out = run["folder"] / "merged"
    assert bench(run["model"], "-t", "cpu", "-t", "cuda:sm_90", "-t", "rocm:gfx942", "--results", str(results),
                 "--baseline", "onnxruntime", "--repeat", "3", "--warmup", "0", "--report", str(out), "-q") == 0
    merged = json.loads((out / "report.json").read_text())
    assert [t["target"] for t in merged["targets"]] == ["cpu", "cuda:sm_90", "rocm:gfx942"]
    cpu, cuda, rocm = merged["targets"]
    assert cpu["status"] == "measured" and cpu["origin"]["kind"] == "this run"
    assert cuda["status"] == "measured" and cuda["latency"]["median_ms"] == pytest.approx(0.0123)
    assert cuda["origin"]["kind"] == "results file" and cuda["origin"]["hostname"] == "gpu-box"
    assert cuda["origin"]["file"] == str(results)
    assert rocm["status"] == "predicted"  # the file only predicted it: predicted here again, not imported
    assert any("cpu was also measured in this run" in n for n in merged["notes"])
    imported_ort = [b for b in merged["baselines"] if b.get("origin", {}).get("hostname") == "gpu-box"]
    assert [b["name"] for b in imported_ort] == ["onnxruntime"]
    md = (out / "report.md").read_text()
    assert "xcomp cuda:sm_90 @ gpu-box | measured (imported)" in md
    assert "cuda:sm_90 (predicted)" not in md


def test_results_file_for_another_model_is_refused(run, tmp_path):
    from xcomp.errors import UserError
    from xcomp.report.results import imported

    results = tmp_path / "gpu.json"
    gpu_results_file(run, results)
    with pytest.raises(UserError, match="different model"):
        imported([str(results)], "0" * 64, {"cpu"})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not an xcomp bench report"):
        imported([str(tmp_path / "bad.json")], "0" * 64, set())


# -- compare ------------------------------------------------------------------------------------------------


def test_compare_flags_regression(run, tmp_path, capsys):
    a = run["report"]
    b = copy.deepcopy(a)
    target(b, "cpu")["latency"]["median_ms"] *= 1.20  # 20% slower: a regression
    slow = target(b, "cpu")["groups"][0]
    slow["median_ms"] *= 1.5
    target(b, "cuda:sm_90")["predicted"]["latency_ms"] *= 2  # predicted: shown, never judged
    for b_ in b["baselines"]:
        if b_["name"] == "onnxruntime":
            b_["latency"]["median_ms"] *= 1.01  # within the threshold
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))

    from xcomp.report import compare_reports

    c = compare_reports(a, b)
    verdicts = {r["runner"]: r["verdict"] for r in c["runners"]}
    assert verdicts["xcomp cpu"] == "regression"
    assert verdicts["xcomp cuda:sm_90"] == "" and verdicts["onnxruntime (cpu)"] == ""
    groups = {g["key"]: g for g in c["groups"]}
    assert groups[slow["key"]]["verdict"] == "regression"
    assert groups[slow["key"]]["change"] == pytest.approx(0.5)
    assert c["regressions"] == 2

    assert compare_reports(a, b, threshold=0.6)["regressions"] == 0
    out = tmp_path / "cmp"
    assert bench("--compare", str(pa), str(pb), "--report", str(out)) == 0
    printed = capsys.readouterr().out
    assert "2 regression(s)" in printed and "!! xcomp cpu" in printed and "REGRESSION" in printed
    html = (out / "compare.html").read_text()
    assert html.count('<tr class="regression">') == 2
    assert "⚠ **xcomp cpu**" in (out / "compare.md").read_text()
    assert json.loads((out / "compare.json").read_text())["regressions"] == 2


# -- tuning curves ------------------------------------------------------------------------------------------


def test_tuning_curve_from_db(run, tmp_path):
    """Best latency so far vs trials, in `created` order; failed candidates count as trials."""
    from xcomp.autotune.db import Record, TuningDB
    from xcomp.report.output import write_report
    from xcomp.report.tuning import tuning_curves

    r = copy.deepcopy(run["report"])
    cpu = target(r, "cpu")
    group = cpu["groups"][0]
    from xcomp.backends.base import HardwareSpec

    fp = HardwareSpec.from_dict(cpu["hardware"]).fingerprint()
    # (created, median ms or None for a failed build), inserted out of order (test data)
    trials = [(5.0, 0.5), (1.0, 2.0), (3.0, None), (2.0, 3.0), (4.0, 1.0)]
    with TuningDB(tmp_path / "t.sqlite") as db:
        db.add_batch([Record(group["key"], group["kind"], "cpu", fp, {"i": i}, [ms] if ms else [],
                             error=None if ms else "build failed", created=created)
                      for i, (created, ms) in enumerate(trials)])
        db.add_batch([Record("other-key", "conv", "cpu", fp, {"i": 0}, [1.0])])  # not this model's group
    tuning = tuning_curves(tmp_path / "t.sqlite", r["targets"])
    assert len(tuning["curves"]) == 1
    curve = tuning["curves"][0]
    assert curve["points"] == [[1, 2.0], [2, 2.0], [3, 2.0], [4, 1.0], [5, 0.5]]
    assert curve["trials"] == 5 and curve["failed"] == 1 and curve["best_ms"] == 0.5 and curve["same_hardware"]
    r["tuning"] = tuning
    paths = write_report(r, tmp_path / "out")
    assert "tuning" in paths["charts"] and os.path.getsize(paths["charts"]["tuning"]) > 5000
    assert 'id="chart-tuning"' in (tmp_path / "out" / "report.html").read_text()


# -- HTML ---------------------------------------------------------------------------------------------------


def test_html_is_self_contained(run):
    html = (run["out"] / "report.html").read_text()
    assert not re.search(r"(src|href)=\"(?!data:|#)", html), "external asset referenced"
    assert "<script" not in html
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)
    charts = sorted(p.name for p in run["out"].glob("*.png"))
    assert len(images) == len(charts) >= 3
    assert {"latency.png", "groups.png", "roofline.png"} <= set(charts)
    md = (run["out"] / "report.md").read_text()
    for name in charts:
        assert f"]({name})" in md


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
                  "--v=0", "--virtual-time-budget=5000"]

PROBE = """<script>window.__errors=[];window.onerror=function(m){window.__errors.push(String(m));};
window.addEventListener('error',function(e){if(e.target&&e.target.tagName){window.__errors.push('failed: '+
e.target.tagName);}},true);
window.addEventListener('load',function(){var imgs=[].slice.call(document.images);var ok=imgs.filter(
function(i){return i.complete&&i.naturalWidth>0;}).length;var d=document.createElement('pre');d.id='probe';
d.textContent=JSON.stringify({images:imgs.length,loaded:ok,errors:window.__errors});document.body.appendChild(d);});
</script>"""


@pytest.mark.skipif(not _chromium(), reason="chromium not installed (apt-get install -y chromium)")
def test_html_renders_in_chromium(run, tmp_path):
    """The page loads with no console message or error, every chart decodes, and a screenshot shows them."""
    chromium = _chromium()
    html = (run["out"] / "report.html").read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("<head>", "<head>" + PROBE, 1))
    profile = tmp_path / "profile"
    r = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                        probed.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout)
    assert found, "the page did not finish loading"
    probe = json.loads(found.group(1).replace("&quot;", '"'))
    assert probe["errors"] == [] and probe["images"] == probe["loaded"] >= 3
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console

    shot = run["out"] / "screenshot.png"
    r = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,2400",
                        "--hide-scrollbars", f"--screenshot={shot}", (run["out"] / "report.html").as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1280, 2400)
        colors = img.convert("RGB").resize((64, 120)).getcolors(64 * 120)
    assert colors and len(colors) > 50, "the screenshot is (nearly) blank"
