"""Wall time of tuning one small model with each runner: local, bundle (round trips through run.py in a
subprocess, as the GPU machine would run it; carrying the folder is not timed), and rpc (a tracker and a server on
localhost, started with python -m tvm.exec.rpc_tracker / rpc_server).

Usage: python benchmarks/remote_runners.py [--trials 16] [--order local,bundle,rpc,...] [--json out.json]

Every runner measures the default schedule plus `--trials` candidates of each operator group; the bundle needs
1 + trials/8 round trips for that (one batch of 8 per group per round trip).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def mlp(batch=32, width=256):
    """x[batch, width] @ W + b, relu, @ W2: two matmul groups of a size worth timing."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (width, width)), ("B", (width,)), ("W2", (width, width // 2)))]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width // 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def local(model, trials, work):
    import xcomp

    os.makedirs(work)
    result, wall = timed(lambda: xcomp.tune(model, db=os.path.join(work, "local.sqlite"), trials=trials))
    return {"wall_s": wall, "measured": result["trials"]}


def bundle(model, trials, work, target_count):
    """Round trips until the database holds `target_count` measurements."""
    import xcomp
    from xcomp.autotune.bundle import BundleRunner, import_results
    from xcomp.autotune.db import TuningDB
    from xcomp.timing import PICKS

    os.makedirs(work)
    db, folder = os.path.join(work, "bundle.sqlite"), os.path.join(work, "bundle")
    rounds, here_s, there_s, measured = 0, 0.0, 0.0, 0
    while measured < target_count:
        runner = BundleRunner(folder)
        _, wall = timed(lambda: xcomp.tune(model, db=db, trials=trials, runner=runner))
        here_s += wall
        proc, wall = timed(lambda: subprocess.run([sys.executable, os.path.join(folder, "run.py")],
                                                  capture_output=True, text=True))
        assert proc.returncode == 0, proc.stderr
        there_s += wall
        with TuningDB(db) as d:
            _, wall = timed(lambda: import_results(folder, d))
            measured = sum(r.timing not in PICKS for r in d.records())  # a group's pick is no measurement
        here_s += wall
        rounds += 1
    return {"wall_s": here_s + there_s, "here_s": here_s, "there_s": there_s, "round_trips": rounds,
            "measured": measured}


def rpc(model, trials, work):
    import xcomp
    from xcomp.autotune.rpc import RPCRunner

    os.makedirs(work)
    tracker = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                                "9190", "--port-end", "9191"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", "9300",
                               "--port-end", "9301", "--tracker", "127.0.0.1:9190", "--key", "bench"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(5)  # both register before the first request
        result, wall = timed(lambda: xcomp.tune(model, db=os.path.join(work, "rpc.sqlite"), trials=trials,
                                                runner=RPCRunner("127.0.0.1", 9190, "bench")))
    finally:
        server.kill()
        tracker.kill()
    return {"wall_s": wall, "measured": result["trials"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--order", default="local,bundle,rpc,local,bundle,rpc", help="runners to time, in order")
    parser.add_argument("--json")
    args = parser.parse_args()
    model = mlp()
    report = {}
    with tempfile.TemporaryDirectory() as work:
        # the first tuning in a machine pays for cold caches: keep that out of every runner's time
        local(model, 2, os.path.join(work, "warmup"))
        for n, name in enumerate(args.order.split(",")):
            folder = os.path.join(work, f"{n}-{name}")
            if name == "bundle":  # as many measurements as the others make: defaults + trials
                row = bundle(model, args.trials, folder, 2 + args.trials)
            else:
                row = {"local": local, "rpc": rpc}[name](model, args.trials, folder)
            report[f"{n}-{name}"] = row
    for name, row in report.items():
        print(name, json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
