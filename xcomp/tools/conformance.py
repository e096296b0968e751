"""`xcomp conformance`: ONNX backend test cases through xcomp and onnxruntime, each in its own process.

Sets: `node` (ONNX's node tests, generated in memory from the installed onnx package), `light` (real models),
`pytorch-converted`, `pytorch-operator`, `simple` (shipped with their inputs and expected outputs). Every case
runs in a process forked from a warm server (TVM imported once), with a timeout, so a crash or a hang is that
case's verdict, not the harness's end. Verdicts: pass, unsupported (a clear UnsupportedOpError), error (another
XcompError), wrong (numbers differ), crash, timeout; and for onnxruntime: pass / fail on the same case.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import multiprocessing
import os
import time

import numpy as np
from xcomp.progress import bar

from xcomp.errors import describe
from xcomp.frontends.examples import read_test_data
from xcomp.frontends.opsets import MAX_OPSET
from xcomp.tools.known_gaps import known_gap

SETS = ("node", "light", "pytorch-converted", "pytorch-operator", "simple")
OPSET_RANGE = (7, MAX_OPSET)  # --sample's node cases: every opset xcomp takes


@dataclasses.dataclass
class Case:
    set: str
    name: str
    op: str  # the first node's op type (node tests test one op)
    opset: int
    source: object  # model path, or the serialized model for node tests
    rtol: float = 1e-3
    atol: float = 1e-4
    data: tuple = None  # node tests: (inputs, expected outputs), generated in memory


def _opset(model) -> int:
    return max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])


def _node_cases():
    import onnx.backend.test.case.node as node

    with np.errstate(all="ignore"):
        for c in node.collect_testcases(None):
            inputs, outputs = c.data_sets[0]
            yield Case("node", c.name, c.model.graph.node[0].op_type, _opset(c.model), c.model.SerializeToString(),
                       max(c.rtol, 1e-3), max(c.atol, 1e-4), (list(inputs), list(outputs)))


def _file_cases(set_name):
    import onnx

    from xcomp.frontends.examples import data_root

    folder = os.path.join(data_root(), set_name)
    paths = sorted(glob.glob(os.path.join(folder, "*.onnx"))) + sorted(glob.glob(os.path.join(folder, "*",
                                                                                               "model.onnx")))
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        name = os.path.basename(os.path.dirname(path)) if path.endswith("model.onnx") else \
            os.path.basename(path)[:-5]
        op = model.graph.node[0].op_type if model.graph.node else ""
        yield Case(set_name, name, op, _opset(model), path)


def collect(sets=SETS, sample: bool = False, ops=None) -> list:
    """Cases of the given sets; sample=True keeps one node case per op type (the first by name)."""
    cases = []
    for set_name in sets:
        found = list(_node_cases()) if set_name == "node" else list(_file_cases(set_name))
        if ops:
            found = [c for c in found if c.op in ops]
        if sample and set_name == "node":
            first = {}
            for c in sorted(found, key=lambda c: c.name):
                if OPSET_RANGE[0] <= c.opset <= OPSET_RANGE[1]:
                    first.setdefault(c.op, c)
            found = list(first.values())
        cases += found
    return cases


# -- in the case process --------------------------------------------------------------------------------------


def _load_case(case):
    """(ModelProto, [input arrays] or None, [expected outputs] or None)."""
    import onnx

    if case.data is not None:
        model = onnx.ModelProto()
        model.ParseFromString(case.source)
        return model, case.data[0], case.data[1]
    model = onnx.load(case.source)
    data = os.path.join(os.path.dirname(case.source), "test_data_set_0")
    if not os.path.isdir(data):
        return model, None, None

    return model, read_test_data(data, "input"), read_test_data(data, "output")


def _close(got, want, case) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if got.dtype.kind in "fc":
        return bool(np.allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True))
    return bool(np.array_equal(got, want))


def compile_as_user(model, feed) -> tuple:
    """(module, names of inputs fixed): xcomp.compile as a user would call it. Inputs it needs at compile time (a
    ReduceSum's axes, a Resize's scales) are given their values from `feed`, as --input-value would."""
    import xcomp
    from xcomp.frontends.input_values import InputValuesRequired

    try:
        return xcomp.compile(model), []
    except InputValuesRequired as err:
        if not set(err.inputs) <= set(feed):
            raise
        return xcomp.compile(model, input_values={name: feed[name] for name in err.inputs}), sorted(err.inputs)


def _run_case(case, queue):
    """Runs in its own process: verdicts for xcomp and for onnxruntime."""
    import xcomp

    verdict = {"xcomp": None, "detail": "", "onnxruntime": None, "seconds": 0.0}
    start = time.monotonic()
    try:
        model, inputs, expected = _load_case(case)
        names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        if inputs is None:  # real models without data: random inputs, onnxruntime as the oracle
            module = xcomp.compile(model)
            feed = module.random_inputs(1)
        else:
            feed = dict(zip(names, inputs))
        try:
            import onnxruntime as ort

            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            ort_out = sess.run(None, feed)
            reference = expected if expected is not None else ort_out
            verdict["onnxruntime"] = "pass" if all(_close(g, w, case) for g, w in zip(ort_out, reference)) \
                else "wrong"
        except Exception as err:
            verdict["onnxruntime"] = "fail"
            reference = expected
            verdict["ort_detail"] = describe(err, first=True)[:200]
        if inputs is not None:
            module, fixed = compile_as_user(model, feed)
            if fixed:
                verdict["fixed_inputs"] = fixed
        got = list(module.run(feed).values())
        if reference is None:
            verdict["xcomp"], verdict["detail"] = "pass", "ran (no reference to compare with)"
        elif len(got) != len(reference) or not all(_close(g, w, case) for g, w in zip(got, reference)):
            verdict["xcomp"] = "wrong"
            diffs = [float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                     if np.shape(g) == np.shape(w) else f"shape {np.shape(g)} vs {np.shape(w)}"
                     for g, w in zip(got, reference)]
            verdict["detail"] = f"max |diff| per output: {diffs}"
        else:
            verdict["xcomp"] = "pass"
    except xcomp.UnsupportedOpError as err:
        verdict["xcomp"], verdict["detail"] = "unsupported", str(err)[:300]
    except xcomp.XcompError as err:
        verdict["xcomp"], verdict["detail"] = "error", f"{type(err).__name__}: {str(err)[:300]}"
    except Exception as err:  # escaped the error family: a bug to fix, reported as such
        verdict["xcomp"], verdict["detail"] = "bug", f"{type(err).__name__}: {str(err)[:300]}"
    verdict["seconds"] = time.monotonic() - start
    queue.put(verdict)


# -- the harness ----------------------------------------------------------------------------------------------


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tvm", "tvm.relax", "onnx", "onnxruntime", "xcomp", "xcomp.pipeline"])
    return ctx


def _poll(queue, timeout):
    import queue as queue_module

    try:
        return queue.get(timeout=timeout) if timeout else queue.get_nowait()
    except queue_module.Empty:
        return None


def run(cases, jobs: int = 1, timeout_s: float = 120.0, progress: bool = True) -> list:
    """[{set, name, op, opset, xcomp, onnxruntime, detail, seconds}] in case order."""
    ctx = _context()
    results = [None] * len(cases)
    pending = list(enumerate(cases))
    running = {}  # index -> (process, queue, start)
    progress_bar = bar(total=len(cases), desc="conformance", unit="case", enabled=progress)
    while pending or running:
        while pending and len(running) < jobs:
            index, case = pending.pop(0)
            queue = ctx.Queue()
            proc = ctx.Process(target=_run_case, args=(case, queue), daemon=True)
            proc.start()
            running[index] = (proc, queue, time.monotonic())
        time.sleep(0.05)
        for index, (proc, queue, start) in list(running.items()):
            verdict = _poll(queue, timeout=0)
            if verdict is not None:
                proc.join(timeout=10)
            elif not proc.is_alive():
                # it may have exited right after putting its verdict: give the queue a moment
                verdict = _poll(queue, timeout=1.0) or {"xcomp": "crash", "detail": f"exit code {proc.exitcode}",
                                                        "onnxruntime": None}
            elif time.monotonic() - start > timeout_s:
                proc.kill()
                proc.join()
                verdict = {"xcomp": "timeout", "detail": f"over {timeout_s:.0f}s", "onnxruntime": None}
            if verdict is None:
                continue
            del running[index]
            case = cases[index]
            results[index] = {"set": case.set, "name": case.name, "op": case.op, "opset": case.opset,
                              "seconds": time.monotonic() - start, **verdict}
            reason = known_gap(case.name)
            if reason:
                results[index]["known_gap"] = reason
            progress_bar.update()
    progress_bar.close()
    return results


def by_op(results) -> dict:
    """{op: Counter of xcomp verdicts}, plus how many of those cases onnxruntime passes."""
    table = collections.defaultdict(collections.Counter)
    for r in results:
        table[r["op"]][r["xcomp"]] += 1
        table[r["op"]]["ort_pass"] += r.get("onnxruntime") == "pass"
    return dict(table)


def by_opset(results) -> dict:
    """{opset: (xcomp passes, onnxruntime passes)} over the cases onnxruntime passes; opset 0 is a model that
    imports no default-domain opset (ai.onnx.ml, preview domains)."""
    table = collections.defaultdict(lambda: [0, 0])
    for r in results:
        if r.get("onnxruntime") == "pass":
            table[r["opset"] or 0][0] += r["xcomp"] == "pass"
            table[r["opset"] or 0][1] += 1
    return {opset: tuple(counts) for opset, counts in sorted(table.items())}


def summary(results) -> dict:
    """Counts of verdicts, and the bar (issues 6 and 30): of the cases that onnxruntime passes, at every opset,
    those xcomp does not are either known gaps (listed with their reason in xcomp/tools/known_gaps.py) or
    `unexplained` (each one a bug to fix or a gap to list)."""
    verdicts = collections.Counter(r["xcomp"] for r in results)
    ort_passes = [r for r in results if r.get("onnxruntime") == "pass"]
    missed = [r for r in ort_passes if r["xcomp"] != "pass"]
    return {
        "cases": len(results),
        "verdicts": dict(verdicts),
        "onnxruntime_pass": len(ort_passes),
        "xcomp_pass_where_onnxruntime_passes": len(ort_passes) - len(missed),
        "by_opset": {str(opset): list(counts) for opset, counts in by_opset(results).items()},
        "known_gaps": sum(bool(r.get("known_gap")) for r in missed),
        "unexplained": [r["name"] for r in missed if not r.get("known_gap")],
        "known_gaps_now_passing": [r["name"] for r in results if r.get("known_gap") and r["xcomp"] == "pass"],
        "xcomp_pass_with_fixed_inputs": sum(r["xcomp"] == "pass" and bool(r.get("fixed_inputs")) for r in results),
    }


def summary_lines(s) -> list:
    """The summary in words, for the terminal and the markdown report."""
    others = s["onnxruntime_pass"] - s["xcomp_pass_where_onnxruntime_passes"]
    lines = [f"onnxruntime passes {s['onnxruntime_pass']}; xcomp passes {s['xcomp_pass_where_onnxruntime_passes']} "
             f"of those; of the {others} others, {s['known_gaps']} are known gaps (each with its reason) and "
             f"{len(s['unexplained'])} are not"
             + (f": {', '.join(s['unexplained'][:20])}" if s["unexplained"] else "."),
             "by opset (xcomp passes / onnxruntime passes): "
             + ", ".join(f"{opset}: {ours}/{theirs}" for opset, (ours, theirs) in s["by_opset"].items())]
    if s["known_gaps_now_passing"]:
        lines.append(f"listed as known gaps but passing now (take them off xcomp/tools/known_gaps.py): "
                     f"{', '.join(s['known_gaps_now_passing'])}")
    lines.append(f"{s['xcomp_pass_with_fixed_inputs']} of xcomp's passes had shape-setting inputs fixed at compile "
                 "time (--input-value, from the case's data), as a user must.")
    return lines


def markdown(results) -> str:
    s = summary(results)
    lines = [
        "# xcomp conformance",
        "",
        f"{s['cases']} cases; xcomp verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items())),
        "",
        *summary_lines(s),
        "",
        "| op | pass | unsupported | wrong | error | crash | timeout | bug | onnxruntime pass |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for op, c in sorted(by_op(results).items()):
        lines.append(f"| {op} | {c['pass']} | {c['unsupported']} | {c['wrong']} | {c['error']} | {c['crash']} | "
                     f"{c['timeout']} | {c['bug']} | {c['ort_pass']} |")
    failing = [r for r in results if r["xcomp"] != "pass"]
    if failing:
        lines += ["", "## Cases xcomp does not pass", "",
                  "| set | case | verdict | onnxruntime | known gap: why | detail |", "|---|---|---|---|---|---|"]
        for r in failing:
            detail = str(r.get("detail", "")).replace("|", "/").replace("\n", " ")[:160]
            lines.append(f"| {r['set']} | {r['name']} | {r['xcomp']} | {r.get('onnxruntime') or ''} | "
                         f"{r.get('known_gap', '')} | {detail} |")
    return "\n".join(lines) + "\n"
