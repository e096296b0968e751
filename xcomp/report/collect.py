"""One report: measure the targets that run here, import results measured elsewhere, predict the rest."""

from __future__ import annotations

import datetime

import numpy as np

from xcomp.report.bench import BLOCK


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def runs_here(target: str) -> bool:
    from xcomp.backends import get_backend

    return get_backend(target).can_run()


def collect_report(model, targets=("cpu",), baselines=("onnxruntime", "torch"), input_shapes=None, db=None,
                   results=(), warmup=3, repeat=30, seed=0, model_label=None, argv=None, progress=True,
                   profile_groups=True, blas=True, input_values=None, torch_model=None, block=BLOCK,
                   costmodel=True, tf32=False) -> dict:
    """The report document (see docs/report-schema.md). `model`: a path, bytes or onnx.ModelProto.
    `repeat` steady calls of every runner, in blocks of `block` calls (xcomp.report.bench.alternating_blocks).
    `profile_groups` / `blas`: time every operator group / the BLAS baseline of GEMM groups (the slow parts).
    `torch_model`: the model as a torch.export file (.pt2), for the torch and torch.compile baselines.
    `costmodel`, `tf32`: as xcomp.compile's, for the targets measured here."""
    from xcomp.backends import get_backend

    from .results import KIND, SCHEMA_VERSION
    from .environment import command_line, machine, model_identity, versions
    from .measure import measure
    from .predict import predict_target
    from .results import imported
    from .tuning import tuning_curves

    created = _now()
    inputs = _inputs(model, input_shapes, input_values)  # reads the model first: a bad model fails with a clear error
    model_info = model_identity(model, model_label or (model if isinstance(model, str) else "<in memory>"))
    model_info["inputs"] = inputs
    names = []
    for t in targets:  # canonical target strings, duplicates dropped
        name = get_backend(t).target_string
        if name not in names:
            names.append(name)
    here = [t for t in names if runs_here(t)]
    notes = []
    if not here and baselines:
        notes.append("no target runs on this machine, so no baseline was timed (baselines are timed beside a "
                     "target measured here; add -t cpu)")
    target_entries, baseline_entries, blas = measure(model, here, list(baselines), input_shapes=input_shapes,
                                                     input_values=input_values, db=db,
                                                     warmup=warmup, repeat=repeat, seed=seed,
                                                     profile_groups=profile_groups, blas=blas,
                                                     progress=progress, torch_model=torch_model,
                                                     block=block, costmodel=costmodel,
                                                     tf32=tf32) if here else ([], [], [])
    uniform = next((e["check"]["reference"] for e in target_entries + baseline_entries
                    if e.get("check", {}).get("uniform_reference")), None)
    if uniform:
        notes.append(f"{uniform}'s outputs are one value repeated (as with the shipped light models' constant "
                     "weights), so matching them says little about correctness; check with real weights")
    other_targets, other_baselines, other_blas, import_notes = imported(results, model_info["sha256"], set(here))
    by_name = {e["target"]: e for e in target_entries + other_targets}
    for name in names:
        if name not in by_name:
            by_name[name] = predict_target(model, name, input_shapes, input_values=input_values,
                                           reason="no such device on this machine and no --results file measured it")
    ordered = [by_name[n] for n in names] + [e for n, e in by_name.items() if n not in names]
    notes += [f"xcomp {e['target']}: float32 math {e['float32_math']}" for e in target_entries
              if e["hardware"]["kind"] == "gpu"]
    if tf32 and any(e["status"] == "predicted" and e["hardware"]["kind"] == "gpu" for e in ordered):
        notes.append("--tf32 applies to the targets measured here: predicted rows bound float32 groups by the "
                     "plain fp32 peak")
    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "created": created,
        "finished": None,
        "command": command_line(argv),
        "settings": {"targets": names, "baselines": list(baselines), "warmup": warmup, "repeat": repeat,
                     "block": block, "seed": seed,
                     "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
                     "db": str(db) if db else None,
                     "costmodel": costmodel if isinstance(costmodel, bool) else str(costmodel),
                     "tf32": bool(tf32),
                     "torch_model": str(torch_model) if torch_model else None,
                     "results": [str(p) for p in results or []]},
        "model": model_info,
        "machine": machine(),
        "versions": versions(),
        "targets": ordered,
        "baselines": baseline_entries + other_baselines,
        "blas": blas + other_blas,
        "tuning": tuning_curves(db, ordered) if db else None,
        "notes": notes + import_notes,
    }
    report["finished"] = _now()
    return report


def _inputs(model, input_shapes, input_values) -> list:
    """The model's inputs with the shapes this run used, and the values of those fixed at compile time."""
    import onnx

    from xcomp.frontends.onnx import _read_proto

    proto = _read_proto(model)[0] if not isinstance(model, onnx.ModelProto) else model
    initializers = {i.name for i in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in vi.type.tensor_type.shape.dim]
        if input_shapes and vi.name in input_shapes:
            dims = list(input_shapes[vi.name])
        out.append({"name": vi.name, "shape": dims,
                    "dtype": onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name})
        if input_values and vi.name in input_values:
            out[-1]["value"] = np.asarray(input_values[vi.name]).tolist()
    return out
