"""The compile pipeline: import -> partition -> schedule each group -> build one Relax VM executable."""

from __future__ import annotations

import dataclasses
import time

from xcomp.progress import bar

from xcomp.errors import InternalError, TargetError, XcompError, describe


@dataclasses.dataclass
class ScheduleChoice:
    """Which config a group was built with, and where it came from."""

    knobs: dict | None
    source: str  # "database", "costmodel", "default", "fallback:<reason>"


def _lowering_passes(spec, fresh_outputs: list, cuda_graph=False):
    """Relax -> VM lowering after our own fusion and scheduling (TVM's default pipeline would fuse again).
    Appends to `fresh_outputs` which outputs of main each call allocates (runtime/fresh_outputs.py).
    cuda_graph: lift the statically planned kernel sequences into functions the VM captures as CUDA graphs on
    their first call and replays after, one launch instead of one per kernel (Relax's RewriteCUDAGraph, which
    runs right after memory planning and acts only under the relax.backend.use_cuda_graph config)."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
    from tvm.relax.backend.gpu_generic import pipeline as gpu_generic

    from xcomp.runtime.fresh_outputs import fresh_outputs_recorder

    generic = gpu_generic if spec.is_gpu else cpu_generic
    finalize = generic.finalize_passes(None)
    finalize.insert(1, fresh_outputs_recorder(fresh_outputs))  # after StaticPlanBlockMemory: outputs are allocated
    if cuda_graph:
        finalize.insert(2, relax.transform.RewriteCUDAGraph())  # after StaticPlanBlockMemory, as TVM's CUDA pipeline
    return tvm.transform.Sequential(generic.dataflow_lower_passes(None) + finalize + [_shape_funcs_noalias()])


def _shape_funcs_noalias():
    """Mark the shape functions the VM lowering adds for symbolic dims (one parameter: the shape heap) as
    `tirx.noalias`. TVM 0.27's LLVM codegen, given one function without that attribute, dropped noalias and the
    per-buffer alias tags from every kernel of the module: LLVM then stored a matmul's register accumulators
    back to memory after every FMA (docs/decisions/symbolic-shapes.md). A function with a single pointer
    parameter has nothing it could alias."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="xcomp.ShapeFuncsNoAlias")
    def _pass(mod, ctx):  # noqa: ARG001
        updates = {gv: func.with_attr("tirx.noalias", True) for gv, func in mod.functions.items()
                   if isinstance(func, tvm.tirx.PrimFunc) and len(func.params) == 1
                   and func.attrs is not None and func.attrs.get("tirx.is_host_func")
                   and not func.attrs.get("tirx.noalias")}
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return _pass


# the source's reason where a database config is left out because the template moved on since it was tuned
STALE_RECORD = "stale record"


def _stale(template, knobs, searched) -> str | None:
    """Why a database config must not replace the template's default now, else None. `searched`: the configs
    the group's newest tuning search measured, that run's default among them. A config is the pick of a run that
    beat that run's default; where the default has changed since, nothing says it beats today's."""
    from xcomp.autotune.db import canonical_knobs

    if not template.in_space(knobs):
        return "its knobs are of an older version of the template; re-tune"
    if canonical_knobs(template.default_knobs()) not in searched:
        return "it was tuned against another default than the template's current one; re-tune"
    return None


def schedule_group(group, ctx, knobs, predictor=None, searched=None):
    """Scheduled PrimFunc for a group and where its schedule came from: the database's config, else (no
    record, `predictor` given and trusted for the group's template here) the cost model's predicted config, else
    the template default, else the template's safe fallback (CPU: the generic schedule), else (CPU) the plain
    func. Each step down says why in the source, e.g. "default (database failed: ...)". `searched` (with a
    database config): the configs its tuning run measured; a config that run did not compare with today's default
    is not used (_stale)."""
    from xcomp import schedules

    reasons = []

    def labelled(source):
        return source if not reasons else f"{source} ({reasons[-1]})"

    try:
        template = schedules.get_template(group.func, ctx, reasons)
    except schedules.Declined as err:
        template = None
        reasons.append(f"no template: {err}")
    except XcompError:
        raise
    except Exception as err:  # a template's bug: a silently slower fallback would hide it
        raise InternalError(f"template for group {group.name} ({group.kind}) failed: {describe(err)}") from err
    if knobs is not None and searched is not None and template is not None:
        why = _stale(template, knobs, searched)
        if why:
            reasons.append(f"{STALE_RECORD}: {why}")
            knobs = None
    attempts = [(knobs, "database")] if knobs is not None else []
    if knobs is None and predictor is not None and template is not None and not group.symbols:
        try:
            predicted = predictor.pick(template, group.kind, seed=group.key)
        except Exception as err:  # a prediction is an extra: the default still serves, and the note says why
            predicted = None
            reasons.append(f"costmodel failed: {describe(err)}")
        if predicted is not None:
            attempts.append((predicted, "costmodel"))
    attempts.append((None, "default"))
    for attempt_knobs, source in attempts if template is not None else []:
        try:
            return template.schedule(attempt_knobs), ScheduleChoice(attempt_knobs, labelled(source))
        except XcompError:
            raise
        except Exception as err:  # a config the template cannot apply to this func: try the next, safer option
            reasons.append(f"{source} failed: {describe(err)}")
    fallback = template.fallback_schedule() if template is not None else None
    if fallback is not None:
        return fallback, ScheduleChoice(None, labelled("generic"))
    if ctx.spec.is_gpu:  # GPU code must be thread-bound: an unscheduled func cannot build
        raise InternalError(f"no schedule for group {group.name} ({group.kind}): {'; '.join(reasons)}")
    return group.func, ScheduleChoice(None, "unscheduled (" + "; ".join(reasons) + ")")


def schedule_module(mod, groups, ctx, best_knobs=None, progress=True, predictor=None, searched=None):
    """Replace every group's PrimFunc with its scheduled version; identical groups are scheduled once.
    `predictor` (costmodel.predict): picks configs for groups without a database config; `searched`: {group key:
    the configs its tuning run measured} for the database's configs (schedule_group)."""
    from xcomp.graph.partition import unique_groups

    best_knobs, searched = best_knobs or {}, searched or {}
    choices = {}
    scheduled = {}
    merged = unique_groups(groups)
    groups_bar = bar(merged.items(), desc="schedule", unit="group", enabled=progress, leave=False)
    for key, (rep, _count) in groups_bar:
        groups_bar.set_postfix_str(rep.kind)
        func, choice = schedule_group(rep, ctx, best_knobs.get(key), predictor, searched.get(key))
        scheduled[key] = func
        choices[key] = choice
    for group in groups:
        gv = mod.get_global_var(group.name)
        func = scheduled[group.key].with_attr("global_symbol", group.name)
        mod[gv] = func
    return mod, choices


def build_executable(mod, backend, cuda_graph=False):
    """tvm.compile the scheduled module for the backend's target (see _lowering_passes for cuda_graph):
    (the executable, one bool per output of main: whether each call allocates it afresh)."""
    import tvm

    problem = backend.toolchain_problem()
    if problem:
        raise TargetError(f"cannot build for {backend.target_string} here: {problem}")
    fresh = []
    try:
        if not cuda_graph:
            return backend.compile(mod, relax_pipeline=_lowering_passes(backend.spec, fresh)), fresh
        with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
            return backend.compile(mod, relax_pipeline=_lowering_passes(backend.spec, fresh, cuda_graph=True)), fresh
    except XcompError:
        raise
    except Exception as err:
        raise InternalError(
            f"building for {backend.target_string} failed: {describe(err)}"
        ) from err


def compile_model(model, target="cpu", input_shapes=None, tune_db=None, progress=True, input_values=None,
                  group_knobs=None, cuda_graph=False, costmodel=True, tf32=False):
    """Model (path, bytes or ModelProto) -> xcomp.Module for `target`; groups with records in `tune_db` get
    their fastest measured config; the rest the cost model's predicted best where its held-out evidence trusts
    the group's template on this hardware (costmodel/predict.py), else their template default. `costmodel`:
    True (the shipped model), False (template defaults: what the tuner measures against), or the path of a
    model file with its .confidence.json beside it. `group_knobs` ({group key: knobs}) sets configs before the
    database does (the tuner compiles the model with chosen candidates so). `cuda_graph`: replay the model's
    kernels as CUDA graphs (CUDA targets only). `tf32`: float32 matmuls and convs may run on TF32 matrix cores
    where the target has them (float32_math says which math the build used)."""
    from xcomp.backends import get_backend
    from xcomp.frontends import load_onnx
    from xcomp.runtime.module import Module
    from xcomp.graph.partition import partition

    timings = {}
    with bar(total=4, desc="compile", unit="step", enabled=progress, leave=False) as steps:
        t0 = time.perf_counter()
        backend = get_backend(target)
        if cuda_graph and backend.name != "cuda":
            raise TargetError(f"CUDA graphs need a CUDA target, not {backend.target_string}")
        backend.tf32 = bool(tf32)
        steps.set_postfix_str("import")
        imported = load_onnx(model, input_shapes, input_values)
        timings["import_s"] = time.perf_counter() - t0
        steps.update()

        t = time.perf_counter()
        steps.set_postfix_str("partition")
        notes = []  # what the user should know about how the model was compiled (an optimisation left out)
        mod, groups = partition(imported.mod, backend.spec, notes)
        best_knobs, searched = None, {}
        if tune_db is not None:
            from xcomp.autotune.db import TuningDB

            target_string, fingerprint = backend.target_string, backend.spec.fingerprint()
            with TuningDB(tune_db) as db:
                best_knobs = db.best_knobs(groups, target_string, fingerprint)
                searched = {key: db.searched_knobs(key, target_string, fingerprint) for key in best_knobs}
        if group_knobs:  # the caller's own configs: used as given
            best_knobs = {**(best_knobs or {}), **group_knobs}
            searched = {key: knobs for key, knobs in searched.items() if key not in group_knobs}
        timings["partition_s"] = time.perf_counter() - t
        steps.update()

        t = time.perf_counter()
        steps.set_postfix_str("schedule")
        predictor = _predictor(backend, costmodel)
        mod, choices = schedule_module(mod, groups, backend.schedule_context(), best_knobs, progress=progress,
                                       predictor=predictor, searched=searched)
        timings["schedule_s"] = time.perf_counter() - t
        if predictor is not None:
            timings["predict_s"] = predictor.seconds
        steps.update()

        t = time.perf_counter()
        steps.set_postfix_str("build")
        executable, fresh_outputs = build_executable(mod, backend, cuda_graph)
        timings["build_s"] = time.perf_counter() - t
        steps.update()
    timings["total_s"] = time.perf_counter() - t0
    math, math_notes = float32_math(backend, groups, choices)
    return Module(
        executable,
        backend,
        inputs=imported.inputs,
        outputs=imported.outputs,
        groups=groups,
        info={
            "model_name": imported.name,
            "opset": imported.opset,
            "compile_times": timings,
            "cuda_graph": cuda_graph,
            "float32_math": math,
            "fresh_outputs": fresh_outputs,
            "schedules": {k: dataclasses.asdict(c) for k, c in choices.items()},
            "notes": (notes + _schedule_notes(groups, choices) + _stale_notes(choices) + _costmodel_notes(choices)
                      + math_notes),
        },
        bound_inputs=imported.bound_inputs,
    )


def float32_math(backend, groups, choices) -> tuple[str, list]:
    """Which math the float32 matmul and conv groups of a build use, "tf32" (TF32 matrix cores: the user's --tf32,
    where the target has them) or "fp32", and the notes that say so: on a GPU build always, elsewhere where --tf32
    was given and had no effect."""
    from xcomp.schedules.gpu import float32_gemm

    ctx = backend.schedule_context()
    tf32_cores = ctx.fragment_intrinsics("tfloat32", "float32") is not None
    if ctx.tf32 and not tf32_cores:
        return "fp32", [f"--tf32: {backend.target_string} has no TF32 matrix cores xcomp can program, so float32 "
                        "math stays fp32 (docs/targets.md)"]
    if not backend.spec.is_gpu:
        return "fp32", []
    names = {g.key: g.name for g in groups}
    reps = {g.key: g for g in groups}
    gemms = [key for key in choices if float32_gemm(reps[key].func)]
    # a group that stepped down to the generic schedule left the matrix-core template (and its tf32)
    on_tf32 = [key for key in gemms if ctx.tf32 and not choices[key].source.startswith("generic")]
    math = "tf32" if on_tf32 else "fp32"
    if not gemms:
        return math, []
    if not ctx.tf32:
        hint = "; --tf32 lets them use TF32 matrix cores: operands rounded to tf32, float32 sums" if tf32_cores else ""
        return math, [f"float32 math: fp32 ({len(gemms)} float32 matmul/conv group(s) on float32 FMAs{hint})"]
    left = [names[key] for key in gemms if key not in on_tf32]
    return math, [f"float32 math: tf32 ({len(on_tf32)} of {len(gemms)} float32 matmul/conv group(s) on TF32 matrix "
                  "cores: operands rounded to tf32, float32 sums" + (f"; fp32: {', '.join(left)}" if left else "")
                  + ")"]


def _predictor(backend, costmodel):
    """The cost model's predictor for this backend's hardware, or None (turned off, or nothing trusted here)."""
    if costmodel is False or costmodel is None:
        return None
    from xcomp.costmodel.predict import load_predictor

    return load_predictor(backend.spec, backend.target(), None if costmodel is True else costmodel)


def _schedule_notes(groups, choices) -> list:
    """A line per unique group whose schedule stepped down from the template's own (or the database's) config."""
    names = {g.key: g.name for g in groups}
    return [f"group {names[key]}: schedule {choice.source}" for key, choice in choices.items()
            if choice.source not in ("database", "default", "costmodel") and STALE_RECORD not in choice.source]


def _stale_notes(choices) -> list:
    """One line saying how many unique groups left their tuning record out because the template moved on."""
    stale = sum(STALE_RECORD in choice.source for choice in choices.values())
    if not stale:
        return []
    return [f"{stale} of {len(choices)} unique groups do not use their tuning record: it was tuned against another "
            "default, or with other knobs, than their template has now (re-tune with xcomp tune --db to use them)"]


def _costmodel_notes(choices) -> list:
    """One line saying how many unique groups run the cost model's predicted config instead of the default."""
    predicted = sum(choice.source.split(" (")[0] == "costmodel" for choice in choices.values())
    if not predicted:
        return []
    return [f"{predicted} of {len(choices)} unique groups use the cost model's predicted config, not the template "
            "default (no tuning records for them; --no-costmodel: the defaults)"]
