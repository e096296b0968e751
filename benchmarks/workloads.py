"""The single-group workloads of the tuning benchmarks (learning_curve.py, vs_metaschedule.py): a GEMM, a 3x3
conv and a depthwise 3x3 conv, each a one-node ONNX model whose one computing operator group is what xcomp tunes
(after our legalization: the conv weight, a constant, arrives packed; on a CPU the 3x3 conv runs on blocked
channels, between two layout transforms that are not tuned here). Also the tuning and timing steps the tuning
benchmarks share (gemm.py too): each reports the tuner's own pick, the config `compile --db` would use."""

from __future__ import annotations

import sys
import time

import numpy as np

# name -> (description, ONNX op, attributes, input shape, weight shape, output shape)
WORKLOADS = {
    "gemm": ("MatMul 512x512x512 fp32", "MatMul", {}, [512, 512], [512, 512], [512, 512]),
    # resnet50's last 3x3 conv: a 7x7 image is too small for Winograd (schedules/cpu/winograd.py), so this tunes
    # the direct conv template, which has the larger knob space
    "conv3x3": ("Conv 1x512x7x7, 512 out, 3x3 pad 1", "Conv", {"pads": [1, 1, 1, 1]},
                [1, 512, 7, 7], [512, 512, 3, 3], [1, 512, 7, 7]),
    "dwconv3x3": ("depthwise Conv 1x128x56x56, 3x3 pad 1, group 128", "Conv", {"pads": [1, 1, 1, 1], "group": 128},
                  [1, 128, 56, 56], [128, 1, 3, 3], [1, 128, 56, 56]),
}


def onnx_model(name: str):
    """y = op(x, W) with a constant random W."""
    from onnx import TensorProto, helper, numpy_helper

    _, op, attrs, x_shape, w_shape, y_shape = WORKLOADS[name]
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal(w_shape).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node(op, ["x", "W"], ["y"], **attrs)], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def task(name: str, backend):
    """A fresh xcomp tuning Task for the workload's one computing operator group (a conv on a CPU also gets the
    layout transforms into and out of the blocked channel layout, which compute nothing)."""
    return computing_task(onnx_model(name), backend, name)


def computing_task(model, backend, name: str):
    """A fresh tuning Task for the one operator group of `model` that computes."""
    from xcomp.autotune.tuner import model_tasks

    tasks, _ = model_tasks(model, backend, None)
    computing = [t for t in tasks if t.group.flops]
    if len(computing) != 1:
        raise RuntimeError(f"{name}: expected one computing operator group, got {[t.group.name for t in tasks]}")
    return computing[0]


def tuner_pick(model, task, backend, trials: int, seed: int, tuning_runner=None, builder=None) -> dict:
    """Tune `task` (model's computing group) as `xcomp tune` does: the search, its confirmation, then the in-model
    step, which keeps the default unless a tuned config beats it there in every round. Returns {knobs: what
    `compile --db` builds the group with, wall_s, measured: trials, tuner_best_ms: the search's best alone,
    kept_default, picked_by}. picked_by is how the pick was judged against the default (a timing of
    xcomp.timing.PICKS: inside the model, or side by side alone where the in-model step did not time the group);
    where nothing judged it, the pick is the default, never a fastest alone that may lose to it.
    `tuning_runner` / `builder`: the Tuner's (default: this benchmark's runner(), a LocalBuilder)."""
    import os
    import tempfile

    from xcomp.autotune import in_model
    from xcomp.autotune.tuner import Tuner
    from xcomp.autotune.db import TuningDB, canonical_knobs
    from xcomp.timing import PICKS

    default = task.template.default_knobs()
    target, fingerprint = backend.target_string, backend.spec.fingerprint()
    with tempfile.TemporaryDirectory(prefix="xcomp-bench-tune-") as tmp, \
            TuningDB(os.path.join(tmp, "t.sqlite")) as db:
        start = time.perf_counter()
        Tuner(backend, db, runner=tuning_runner or runner(), builder=builder, seed=seed,
              progress=False).tune([task], trials=trials)
        in_model.refine(model, backend, db, [task], progress=False)
        wall_s = time.perf_counter() - start
        picked_by = db.latest_timing(task.group.key, target, fingerprint)
        knobs = db.best_knobs([task.group], target, fingerprint).get(task.group.key, default)
    if picked_by not in PICKS:
        knobs, picked_by = default, None
    return {"knobs": knobs, "wall_s": wall_s, "measured": task.trials - 1, "tuner_best_ms": task.best_ms,
            "kept_default": canonical_knobs(knobs) == canonical_knobs(default), "picked_by": picked_by}


def runner():
    """The runner the benchmarks tune with: warm timing (LocalRunner(cold_weights=False)), because they re-time
    the winners alone and warm, as numpy is timed; tuning cold (the default, for kernels inside a model) would
    search for another objective than the one they report."""
    from xcomp.autotune.measure import LocalRunner

    return LocalRunner(cold_weights=False)


def setup(parser, names: list):
    """(the workloads to run: `names`, all when empty; the cpu backend) for a benchmark's main, after checking the
    names and paying for the tensor_intrin import."""
    from xcomp.backends import get_backend

    unknown = set(names) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {list(WORKLOADS)}")
    backend = get_backend("cpu")
    preload_tensor_intrin()
    return names or list(WORKLOADS), backend


def preload_tensor_intrin():
    """MetaSchedule's TuneContext, which our cost model's features and ms.tune_tir both create, imports
    tvm.s_tir.tensor_intrin once per process, a slow import: pay that before any tuning clock starts
    (docs/decisions/one-time-costs.md)."""
    from xcomp.backends.tvm_compat import tensor_intrinsics

    start = time.perf_counter()
    tensor_intrinsics()

    print(f"# import tvm.s_tir.tensor_intrin: {time.perf_counter() - start:.0f} s (in no wall time below)",
          file=sys.stderr, flush=True)


def interleaved_medians(timers: dict, rounds: int) -> dict:
    """{key: median ms over rounds}: every timer (benchmarks/gemm.py's Timer) called once per round, in turn, so a
    busier moment of the shared machine hits all of them alike."""
    samples = {key: [] for key in timers}
    for _ in range(rounds):
        for key, timer in timers.items():
            samples[key].append(timer())
    return {key: float(np.median(values)) for key, values in samples.items()}
