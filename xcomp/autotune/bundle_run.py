"""Check built kernels against a reference build and time them, each in an isolated process.

This file and the one it times with (xcomp/timing.py) need only the standard library, numpy and TVM, so it serves
twice: `LocalRunner` measures through `IsolatedMeasurer`, and a measurement bundle (bundle.py) carries a copy of
it as `run.py`, with timing.py beside it, to the machine with the GPU, where

    python3 BUNDLE/run.py                      (or, where xcomp is installed: python3 -m xcomp.autotune.bundle_run BUNDLE)

measures every candidate listed in BUNDLE/manifest.json, then times each group's default and fastest alone side by
side (side_by_side), and writes BUNDLE/results.json. A candidate that crashes
the process, hangs, or computes a different answer than the reference is a failure with its reason, and the next
one runs in a fresh process. Inputs are regenerated from seeds, so a bundle ships no arrays.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import traceback

import numpy as np

if __package__:
    from xcomp.timing import Timing, kernel_timing, time_kernel
else:  # run.py of a bundle, on a machine that may have no xcomp: the bundle carries timing.py beside it
    from timing import Timing, kernel_timing, time_kernel

FORMAT = 1  # version of manifest.json / results.json

# Numerics every candidate must reproduce against the reference (the template's default schedule).
RTOL, ATOL = 1e-3, 1e-4
INPUT_SEED = 0  # random_args seed of every measurement: the same inputs here, in a bundle, over RPC


def device_kind(target: str) -> str:
    """The TVM device kind that runs code of an xcomp target string: 'cuda:sm_90' -> 'cuda', 'cpu:znver4' -> 'cpu'."""
    kind = target.partition(":")[0]
    return "cpu" if kind in ("cpu", "llvm", "x86", "host") else kind


def failure_reason(err: BaseException) -> str:
    """'Type: last non-empty line of the message' (TVM puts the reason last, after its stack)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1]}" if lines else type(err).__name__


def random_args(params, seed: int):
    """Deterministic data for every buffer: floats in [-1, 1), integers 0 (always a valid index)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in params:
        if np.issubdtype(np.dtype(dtype), np.floating):
            arrays.append(rng.uniform(-1, 1, shape).astype(dtype))
        else:
            arrays.append(np.zeros(shape, dtype))
    return arrays


def request_timing(request) -> Timing:
    """The policy a request is timed under, from its device and settings."""
    return kernel_timing(request.get("device"), request.get("cold_weights", False), request.get("rpc_session", False),
                         request.get("evict_private_bytes", 0))


def check_and_time(load, dev, reference_outputs, request) -> dict:
    """Run the candidate once, compare every buffer with `reference_outputs` (the reference's, same inputs), then
    time it; with request["check"] false (a later slice of a candidate already checked), only time it.
    load(path) -> runtime module. Returns {"latencies_ms": [...]} or {"error": reason}.
    Every runner measures through this, local or remote."""
    import tvm

    lib = load(request["artifact"])
    args = [tvm.runtime.tensor(a, dev) for a in random_args(request["params"], request["seed"])]
    if request.get("check", True):
        lib["main"](*args)
        dev.sync()
        for got, want in zip(args, reference_outputs):
            got = got.numpy()
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                return {"error": f"wrong result: max |diff| {err:.3g} vs the default schedule"}
    return {"latencies_ms": time_kernel(lib, dev, args, request_timing(request), request["number"],
                                        request["repeat"], request.get("min_repeat_ms", 0),
                                        request.get("evict_private_bytes", 0))}


def reference_outputs(load, dev, request, cache: dict) -> list:
    """The reference's buffers after one run on the request's inputs, computed once per (reference, params, seed)
    and kept in `cache`."""
    import tvm

    key = (request["reference"], json.dumps(request["params"]), request["seed"])
    if key not in cache:
        args = [tvm.runtime.tensor(a, dev) for a in random_args(request["params"], request["seed"])]
        load(request["reference"])["main"](*args)
        dev.sync()
        cache[key] = [a.numpy() for a in args]
    return cache[key]


def _worker(conn):
    """The isolated process: one request at a time, each answered with timings or a failure reason."""
    import tvm

    caches = {}  # device kind -> reference outputs
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        try:
            dev, load = tvm.device(request["device"], 0), tvm.runtime.load_module
            want = reference_outputs(load, dev, request, caches.setdefault(request["device"], {}))
            reply = check_and_time(load, dev, want, request)
        except Exception as err:
            reply = {"error": "run: " + failure_reason(err), "trace": traceback.format_exc(limit=3)}
        conn.send(reply)


class IsolatedMeasurer:
    """One measuring process; a hang is killed after `timeout_s`, a crash is reported, then it restarts.

    `startup_grace_s` is added to the first request of each process, which also pays for importing TVM (and, on a
    GPU, for the first kernel compilation)."""

    def __init__(self, timeout_s: float = 30.0, startup_grace_s: float = 60.0):
        self.timeout_s, self.startup_grace_s = timeout_s, startup_grace_s
        self._proc = self._conn = None
        self._fresh = False

    def _start(self):
        ctx = multiprocessing.get_context("spawn")  # TVM's thread pools do not survive fork well
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn, self._fresh = parent, True

    def _stop(self):
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=5)
        self._proc = self._conn = None

    def measure(self, request: dict) -> dict:
        """request: device ("cpu", "cuda", "rocm"), reference, artifact (library paths), params [(shape, dtype)],
        seed, number, repeat, min_repeat_ms, cold_weights -> {"latencies_ms": [...]} or {"error": reason}."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send(request)
        grace, self._fresh = (self.startup_grace_s if self._fresh else 0.0), False
        if not self._conn.poll(self.timeout_s + grace):
            self._stop()
            return {"error": f"run: timed out after {self.timeout_s:.0f}s"}
        try:
            return self._conn.recv()
        except EOFError:  # the process died mid-run: a segfault, an abort, ...
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            self._stop()
            return {"error": f"run: crashed (exit code {code})"}

    def close(self):
        if self._conn is not None:
            self._conn.close()
        self._stop()


# -- the bundle script ----------------------------------------------------------------------------------------


class BundleError(Exception):
    """The bundle cannot be measured here (wrong format, TVM version, missing or different device)."""


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)  # a killed run leaves the previous complete file, never half of one


def _device_info(manifest) -> dict:
    """The device this machine gives the bundle's target; BundleError when it cannot run the bundle's code."""
    import tvm

    dev = tvm.device(manifest["device"], 0)
    if not dev.exist:  # TVM's CUDA runtime needs libcudart on LD_LIBRARY_PATH, else it loads without CUDA
        raise BundleError(f"no {manifest['device']} device visible here (for CUDA: is libcudart on "
                          "LD_LIBRARY_PATH?)")
    info = {"kind": manifest["device"], "name": dev.device_name if manifest["device"] != "cpu" else "cpu",
            "compute_version": dev.compute_version if manifest["device"] != "cpu" else ""}
    if manifest["device"] == "cuda":
        arch = "sm_" + info["compute_version"].replace(".", "")
        if arch != manifest["arch"]:
            raise BundleError(f"the bundle is for {manifest['target']} but this GPU is {arch} ({info['name']})")
    return info


def read_json(path) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as err:
        raise BundleError(f"cannot read {path}: {err.strerror}") from None
    except ValueError as err:
        raise BundleError(f"{path}: not JSON ({err})") from None


def read_manifest(folder) -> dict:
    path = os.path.join(folder, "manifest.json")
    if not os.path.exists(path):
        raise BundleError(f"{folder} holds no manifest.json: not a measurement bundle from `xcomp tune --runner "
                          "bundle`")
    manifest = read_json(path)
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: bundle format {manifest.get('format')}, this script reads {FORMAT}")
    return manifest


def run_bundle(folder, log=print) -> dict:
    """Measure every candidate of the bundle in `folder` not measured yet; results.json is rewritten after each,
    so a run that is stopped keeps what it measured and a rerun goes on from there. Returns the results document."""
    import tvm

    manifest = read_manifest(folder)
    built_with, here = manifest["tvm_version"], tvm.__version__
    if built_with.split(".")[:2] != here.split(".")[:2]:
        raise BundleError(f"the bundle was built with TVM {built_with}; this machine has TVM {here}: install "
                          f"apache-tvm=={built_with}")
    results_path = os.path.join(folder, "results.json")
    doc = {"format": FORMAT, "bundle_id": manifest["bundle_id"], "tvm_version": here,
           "device": _device_info(manifest), "complete": False, "results": {}, "side_by_side": {}}
    if os.path.exists(results_path):  # a rerun after an interruption goes on where it stopped
        previous = read_json(results_path)
        if previous.get("bundle_id") == manifest["bundle_id"]:
            doc["results"], doc["side_by_side"] = previous["results"], previous.get("side_by_side", {})
    settings = manifest["measure"]
    measurer = IsolatedMeasurer(settings["timeout_s"], settings["startup_grace_s"])
    todo = [item for item in manifest["items"] if item["error"] is None and item["id"] not in doc["results"]]
    start = time.perf_counter()

    def measure(workload, artifact) -> dict:
        return measurer.measure({
            "device": manifest["device"], "reference": os.path.join(folder, workload["reference"]),
            "artifact": os.path.join(folder, artifact), "params": workload["params"], "seed": workload["seed"],
            "number": settings["number"], "repeat": settings["repeat"], "min_repeat_ms": settings["min_repeat_ms"],
            "cold_weights": settings.get("cold_weights", False),  # older bundles timed warm
            "evict_private_bytes": workload.get("evict_private_bytes", 0)})

    try:
        for n, item in enumerate(todo, start=1):
            reply = measure(manifest["workloads"][item["workload"]], item["artifact"])
            doc["results"][item["id"]] = {k: reply[k] for k in ("latencies_ms", "error") if k in reply}
            write_json(results_path, doc)
            outcome = reply.get("error") or f"{float(np.median(reply['latencies_ms'])):.4f} ms"
            log(f"[{n}/{len(todo)}] {item['id']}: {outcome}")
        for wid, entry in manifest.get("side_by_side", {}).items():
            if wid not in doc["side_by_side"]:
                doc["side_by_side"][wid] = side_by_side(manifest, doc["results"], wid, entry, measure)
                write_json(results_path, doc)
                log(f"side by side {wid}: {_describe_rounds(doc['side_by_side'][wid])}")
    finally:
        measurer.close()
    doc["complete"] = True
    write_json(results_path, doc)
    log(f"measured {len(todo)} candidate(s) in {time.perf_counter() - start:.1f}s -> {results_path}; copy it back "
        "into the bundle folder on the machine that made it")
    return doc


def _key(knobs) -> str:
    """A config's canonical JSON, as the tuning database spells it (xcomp.autotune.db.canonical_knobs)."""
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"))


def side_by_side(manifest, results, wid, entry, measure) -> dict:
    """Time a group's default and its fastest alone side by side, entry["rounds"] rounds, each the default then
    the other. The fastest alone is the fastest of the configs known where the bundle was made (entry["known"]:
    the default first, with their medians there) and of this bundle's results for the group. Returns {default,
    best (knobs), default_ms, best_ms (the median of each round), error (where a run failed: the rounds stop)};
    with the default fastest, no rounds. The import applies the rule (measure.side_by_side_pick)."""
    default = entry["known"][0]
    contenders = {_key(c["knobs"]): (c["median_ms"], c["knobs"], c["artifact"]) for c in entry["known"]}
    for item in manifest["items"]:
        result = results.get(item["id"], {})
        if item["workload"] == wid and result.get("latencies_ms") and not result.get("error"):
            contenders[_key(item["knobs"])] = (float(np.median(result["latencies_ms"])), item["knobs"],
                                               item["artifact"])
    # on a tie the other config is timed against the default: the tuner sees it as the fastest alone
    _, best_knobs, best_artifact = min(contenders.values(), key=lambda c: (c[0], c[1] == default["knobs"]))
    outcome = {"default": default["knobs"], "best": best_knobs, "default_ms": [], "best_ms": []}
    if _key(best_knobs) == _key(default["knobs"]):
        return outcome
    workload = manifest["workloads"][wid]
    for _ in range(entry["rounds"]):
        for times, artifact in ((outcome["default_ms"], default["artifact"]), (outcome["best_ms"], best_artifact)):
            reply = measure(workload, artifact)
            if reply.get("error"):
                return {**outcome, "error": reply["error"]}
            times.append(float(np.median(reply["latencies_ms"])))
    return outcome


def _describe_rounds(outcome) -> str:
    if outcome.get("error"):
        return f"stopped: {outcome['error']}"
    if not outcome["best_ms"]:
        return "the default is the fastest alone: nothing to time"
    rounds = ", ".join(f"{d:.4f}/{b:.4f}" for d, b in zip(outcome["default_ms"], outcome["best_ms"]))
    return f"default/fastest ms per round: {rounds}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 1
    folder = argv[0] if argv else os.path.dirname(os.path.abspath(__file__))
    try:
        run_bundle(folder)
    except BundleError as err:
        print(f"bundle {folder}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: results.json keeps every candidate measured so far; rerun to go on", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
