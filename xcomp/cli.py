"""The `xcomp` command line: compile, run, info, bench.

Exit codes: 0 success, 1 user error (bad model, input, target, file), 2 internal error (a bug: please report).
Every command takes --json for machine-readable output on stdout; progress bars go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import numpy as np

EPILOG = """\
examples:
  xcomp compile model.onnx -o model.xc                 compile for this CPU
  xcomp compile onnx:light_resnet50 -t cuda:sm_90      cross-compile a model shipped with the onnx package
  xcomp run model.xc --input x=x.npy --output out.npz  run on given inputs (random inputs if none)
  xcomp info model.onnx                                ops, operator groups, anything unsupported
  xcomp bench onnx:light_resnet50 --baseline onnxruntime
  xcomp tune model.onnx --trials 500 --db tune.sqlite  tune, then: xcomp compile model.onnx --db tune.sqlite
  xcomp db export tune.sqlite records.jsonl            share records with another machine (db import)
  xcomp tune model.onnx -t cuda:sm_90 --runner bundle --bundle-dir b/
                                                       tune a GPU from a CPU-only machine (measured by b/run.py there)

models: a path to an .onnx file, or onnx:NAME for a model that ships inside the onnx package
        (onnx:light_resnet50, onnx:light_vgg19, onnx:test_AvgPool2d, ...).
targets: cpu (this machine), cpu:skylake-avx512, cpu:znver4, cpu:aarch64-linux-gnu, cuda, cuda:sm_80,
         cuda:sm_90, rocm:gfx90a, rocm:gfx942.
exit codes: 0 ok, 1 user error, 2 internal error.
"""


def _parse_shape_arg(text: str):
    """'x=1,3,224,224' -> ('x', (1, 3, 224, 224))."""
    from xcomp.errors import UserError

    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise UserError(f"--input-shape {text!r}: expected NAME=D1,D2,... e.g. data=1,3,224,224") from None


def _input_shapes(args):
    return dict(_parse_shape_arg(s) for s in args.input_shape or []) or None


def _parse_value_arg(text: str):
    """'axes=1,2' -> ('axes', [1, 2]); 'scales=s.npy' -> ('scales', array from the file)."""
    from xcomp.errors import UserError

    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise UserError(f"--input-value {text!r}: expected NAME=V1,V2,... or NAME=FILE.npy, e.g. axes=1")
    if values.endswith(".npy"):
        try:
            return name, np.load(values)
        except (OSError, ValueError) as err:
            raise UserError(f"--input-value {name}: cannot read {values}: {err}") from None
    parsed = []
    for token in values.split(","):
        try:
            parsed.append(int(token))
        except ValueError:
            try:
                parsed.append(float(token))
            except ValueError:
                raise UserError(f"--input-value {text!r}: {token!r} is not a number") from None
    return name, parsed


def _input_values(args):
    return dict(_parse_value_arg(s) for s in args.input_value or []) or None


def _load_inputs(specs, module):
    """--input values: NAME=file.npy, or one .npz holding every input by name."""
    from xcomp.errors import InputError

    inputs = {}
    for spec in specs or []:
        name, sep, path = spec.rpartition("=")
        if not sep:
            path = spec
        if not os.path.isfile(path):
            raise InputError(f"--input {spec!r}: no such file {path!r}")
        try:
            data = np.load(path, allow_pickle=False)
        except Exception as err:
            raise InputError(f"--input {spec!r}: cannot read {path!r} as .npy/.npz ({err})") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            inputs.update({k: data[k] for k in data.files})
        elif sep:
            inputs[name] = data
        elif len(module.inputs) == 1:
            inputs[module.inputs[0].name] = data
        else:
            raise InputError(f"--input {spec!r}: the model has several inputs; write NAME=file.npy")
    return inputs


def _model_arg(text):
    from xcomp.frontends.examples import resolve

    return resolve(text)


def _fmt_flops(n):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(int(n))


def _table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in
              enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


# -- commands -------------------------------------------------------------------------------------------------


def _check_writable(path):
    """Stop before a compile, not after it, when its output cannot be written (save makes missing folders)."""
    from xcomp.errors import UserError

    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if os.path.isdir(path):
        raise UserError(f"cannot write {path}: it is a folder")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise UserError(f"cannot write {path}: {folder} is not a writable folder")


def cmd_compile(args):
    import xcomp

    model = _model_arg(args.model)
    out = args.output or os.path.splitext(os.path.basename(model if isinstance(model, str) else "model"))[0] + ".xc"
    _check_writable(out)
    module = xcomp.compile(model, target=args.target, input_shapes=_input_shapes(args), tune_db=args.db,
                           progress=not args.quiet, input_values=_input_values(args), cuda_graph=args.cuda_graph,
                           costmodel=args.costmodel, tf32=args.tf32)
    module.save(out)
    emitted = []
    if args.emit_source:
        emitted = module.emit_sources(args.emit_source)
    result = {
        "output": out,
        "target": module.target,
        "hardware": module.spec.name,
        "groups": len(module.groups),
        "unique_groups": len({g.key for g in module.groups}),
        "compile_times": module.info["compile_times"],
        "emitted": emitted,
        "notes": module.info.get("notes", []),
    }
    if args.json:
        return result
    t = module.info["compile_times"]
    print(f"compiled {args.model} for {module.target} ({module.spec.name}) in {t['total_s']:.1f}s "
          f"({result['unique_groups']} unique of {result['groups']} operator groups) -> {out}")
    for path in emitted:
        print(f"  wrote {path}")
    for note in result["notes"]:
        print(f"  note: {note}")
    return None


def _open_module(args):
    """A .xc file is loaded; anything else is compiled first."""
    import xcomp

    model = _model_arg(args.model)
    if isinstance(model, str) and model.endswith(".xc"):
        module = xcomp.load(model)
        if args.input_value:
            from xcomp.errors import UserError

            fixed = ", ".join(f"{s.name}={list(s.value)}" for s in module.bound_inputs) or "none"
            raise UserError(f"--input-value fixes inputs when compiling; {model} is compiled already (inputs it "
                            f"fixed: {fixed})")
        return module
    return xcomp.compile(model, target=args.target, input_shapes=_input_shapes(args), tune_db=args.db,
                         progress=not args.quiet, input_values=_input_values(args), costmodel=args.costmodel,
                         tf32=args.tf32)


def cmd_run(args):
    module = _open_module(args)
    inputs = _load_inputs(args.input, module)
    generated = not inputs
    if generated:  # a symbolic dim gets its size from --input-shape, else 1
        inputs = module.random_inputs(args.seed, _input_shapes(args))
    outputs = module.run(inputs)
    if args.output:
        np.savez(args.output, **outputs)
    summary = {
        "target": module.target,
        "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype), "random": generated} for k, v in
                   inputs.items()},
        "outputs": {
            k: {"shape": list(v.shape), "dtype": str(v.dtype), "checksum": float(np.sum(v, dtype=np.float64)),
                "mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))}
            for k, v in outputs.items()
        },
        "saved": args.output,
    }
    if args.json:
        return summary
    if generated:
        shapes = ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in inputs.items())
        print(f"no --input given: random inputs (seed {args.seed}): {shapes}")
    for name, o in summary["outputs"].items():
        print(f"{name}: {o['dtype']}{o['shape']} checksum={o['checksum']:.6g} "
              f"min={o['min']:.6g} max={o['max']:.6g}")
    if args.output:
        print(f"outputs written to {args.output}")
    return None


def cmd_info(args):
    from xcomp.tools.inspect_model import describe

    info = describe(_model_arg(args.model), target=args.target, input_shapes=_input_shapes(args),
                    input_values=_input_values(args))
    if args.json:
        return info
    print(f"model {info['model']}  opset {info['opset']}  target {info['target']}")
    for s in info["inputs"]:
        fixed = f" = {s['value']} (fixed by --input-value)" if "value" in s else ""
        print(f"  input  {s['name']}: {s['dtype']}{s['shape']}{fixed}")
    for s in info.get("outputs", []):
        print(f"  output {s['name']}: {s['dtype']}{s['shape']}")
    print("\nops:")
    print(_table([(op, n) for op, n in info["ops"].items()], ["op", "count"]))
    if info["unsupported"]:
        print(f"\nunsupported ({len(info['unsupported'])} node(s)):")
        print(_table([(u["node"], u["op"], u["opset"]) for u in info["unsupported"]], ["node", "op", "opset"]))
        return None
    if "needs_input_values" in info:
        print(f"\nall ops supported, but {info['needs_input_values']['message']}")
        return None
    rows = [(g["kind"], g["key"], g["count"], g.get("flops_expr") or _fmt_flops(g["flops"]),
             _fmt_flops(g["bytes"]) + "B", g["signature"]) for g in info["groups"]]
    total = info.get("total_flops_expr") or _fmt_flops(info["total_flops"])
    print(f"\noperator groups ({len(info['groups'])} unique, "
          f"{sum(g['count'] for g in info['groups'])} calls, {total} FLOP per run):")
    if info.get("total_flops_expr"):
        print(f"(symbolic dims {info['symbols']}: FLOPs as expressions of them; bytes with each at 1)")
    print(_table(rows, ["kind", "key", "count", "FLOPs", "bytes", "signature"]))
    print("\nall ops supported")
    return None


def _parse_duration(text):
    """'90', '90s', '10m', '1h' -> seconds."""
    from xcomp.errors import UserError

    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except (ValueError, IndexError):
        raise UserError(f"--time {text!r}: expected seconds or a duration such as 90s, 10m, 1h") from None


def _make_runner(args):
    """The --runner: None measures here; bundle and rpc measure on another machine."""
    from xcomp.errors import UserError

    if args.runner == "bundle":
        from xcomp.autotune.bundle import BundleRunner

        if not args.bundle_dir:
            raise UserError("--runner bundle needs --bundle-dir DIR (the folder to carry to the measuring machine)")
        return BundleRunner(args.bundle_dir)
    if args.runner == "rpc":
        from xcomp.autotune.rpc import RPCRunner, parse_tracker

        if not (args.rpc_tracker and args.rpc_key):
            raise UserError("--runner rpc needs --rpc-tracker HOST:PORT and --rpc-key KEY")
        return RPCRunner(*parse_tracker(args.rpc_tracker), args.rpc_key)
    return None


def _print_bundle_imported(runner):
    if runner.imported:
        i = runner.imported
        print(f"imported {i['imported']} result(s) from {runner.folder} (measured on {i['device']['name']}"
              + (f"; {i['not_measured']} candidate(s) the run did not reach" if i["not_measured"] else "") + ")")
        _print_side_by_side(i.get("side_by_side"))
        print()


def _print_side_by_side(picks):
    """Each group's default against its fastest alone in an imported bundle's side-by-side rounds."""
    import numpy as np

    for key, p in (picks or {}).items():
        wins = sum(b < d for b, d in zip(p["best_ms"], p["default_ms"]))
        verdict = ("uses the tuned config" if p["picked"] == p["best"] else
                   f"keeps the default (the tuned config was faster in {wins} of {len(p['default_ms'])} rounds)")
        print(f"  {key}: default {np.median(p['default_ms']):.4f} ms, tuned {np.median(p['best_ms']):.4f} ms side "
              f"by side: {verdict}")


def _print_bundle_next(runner, args):
    import shlex

    if runner.pending or runner.side_by_side:
        print("\n" + runner.instructions(" ".join(shlex.quote(a) for a in args.argv)))
    else:
        print("nothing left to measure: every group's knob space is exhausted or the trials are spent")


def _print_in_model(refined):
    """The in-model step's outcome: which groups keep their default, which run another config than their
    fastest alone, and what the picks save against the defaults."""
    from xcomp.autotune.in_model import changed, kept_default
    from xcomp.autotune.db import canonical_knobs

    if not refined:
        return
    if "error" in refined:
        print(f"Timing the configs inside the model failed ({refined['error']}); compile --db uses each group's "
              "fastest timed alone.")
        return
    kept, moved = kept_default(refined), changed(refined)
    print(f"Inside the model (each group's default and {refined['ranks'] - 1} fastest other configs, "
          f"{refined['rounds']} x {refined['runs']} runs each; groups timed: {len(refined['groups'])}): defaults "
          f"{refined['model_default_ms']:.3f} -> picks {refined['model_picked_ms']:.3f} ms (ms x count). "
          f"Keep their default (no tuned config beat it in every round, or not in the build of the picks "
          f"together): {len(kept)}. Run another tuned config than their fastest alone: {len(moved)}.")
    for row in moved:
        times = row["in_model_ms"]
        fastest, picked = (times[canonical_knobs(row[k])] for k in ("fastest_alone", "picked"))
        print(f"  {row['group'][:40]}: {fastest:.4f} -> {picked:.4f} ms with {canonical_knobs(row['picked'])}")
    _print_together(refined)
    if refined["together"] and len(kept) == len(refined["groups"]):
        print("The picks did not beat the default build together: compile --db uses every group's default.")


def _print_together(refined):
    """Each build of the picks together against the default build, and which picks went back to the default."""
    names = {row["key"]: row["group"] for row in refined["groups"]}
    for check in refined["together"]:
        slower = [names[key] for key in check["slower"]]
        listed = ", ".join(slower[:6]) + (", ..." if len(slower) > 6 else "")
        print(f"Together: the model built with {check['picks']} picks against the default build, sum of group "
              f"times {check['model_default_ms']:.3f} -> {check['model_picked_ms']:.3f} ms (faster in "
              f"{check['rounds_won']} of {refined['rounds']} rounds)"
              + (f"; {len(slower)} picks slower there go back to their default: {listed}." if slower else "."))


def cmd_tune(args):
    import math

    import xcomp

    runner = _make_runner(args)
    result = xcomp.tune(_model_arg(args.model), target=args.target, db=args.db, trials=args.trials,
                        time_budget_s=_parse_duration(args.time) if args.time else None,
                        input_shapes=_input_shapes(args), input_values=_input_values(args), seed=args.seed,
                        progress=not args.quiet, runner=runner, in_model_top=args.in_model_top)
    bundle = args.runner == "bundle"
    if bundle:
        result["bundle"] = {"folder": runner.folder, "imported": runner.imported, "pending": runner.pending,
                            "side_by_side": runner.side_by_side}
    if args.json:
        return result

    def ms(v, waiting=False):
        return f"{v:.4f}" if v is not None and math.isfinite(v) else "pending" if waiting else "failed"

    if bundle:
        _print_bundle_imported(runner)
    rows = [(g["group"][:40], g["kind"], g["count"], g["trials"], ms(g["default_ms"], g["waiting"]),
             ms(g["best_ms"], g["waiting"]), f"{g['speedup']:.2f}x" if g["speedup"] else "-", g["timed"],
             "default" if g["kept_default"] else "tuned" if g["best_knobs"] is not None else "-")
            for g in result["groups"]]
    print(_table(rows, ["group", "kind", "count", "trials", "default ms", "tuned ms", "speedup", "timed", "uses"]))
    kept = [g for g in result["groups"] if g["kept_default"]]
    if kept:
        print("\nKeep their default (compile --db builds it):")
        for g in kept:
            print(f"  {g['group'][:40]}: {g['why']}")
    print(f"\n{result['trials']} trials; sum over groups (ms x count): default {result['model_default_ms']:.3f} ms"
          f" -> tuned {result['model_tuned_ms']:.3f} ms. Records in {result['db']}; "
          f"use them with: xcomp compile {args.model} --db {result['db']}")
    _print_in_model(result["in_model"])
    untuned = result["untuned_symbolic"]
    if untuned:
        symbols = sorted({s for g in untuned for s in g["symbols"]})
        print(f"{len(untuned)} group(s) with symbolic dims {symbols} not tuned (their generic schedule serves every "
              f"size); to tune them, tune and compile with --input-shape")
    if bundle:
        _print_bundle_next(runner, args)
    return None


def cmd_db(args):
    from xcomp.autotune.db import TuningDB

    with TuningDB(args.db) as db:
        if args.action == "export":
            n = db.export_jsonl(args.file)
            result = {"exported": n, "file": args.file}
        elif args.action == "import-results":
            from xcomp.autotune.bundle import import_results

            summary = import_results(args.file, db)
            if summary is None:
                from xcomp.errors import UserError

                raise UserError(f"{args.file}: no measurement bundle there (nothing to import)")
            result = dict(summary, folder=args.file)
        else:
            new, old = db.import_jsonl(args.file)
            result = {"imported": new, "already_present": old, "file": args.file}
        result["total_records"] = db.count()
    if args.json:
        return result
    picks = result.pop("side_by_side", None)
    print(", ".join(f"{k}: {v}" for k, v in result.items()))
    _print_side_by_side(picks)
    return None


def cmd_conformance(args):
    from xcomp.tools import conformance

    sets = args.set or ["node", "light", "pytorch-converted", "pytorch-operator", "simple"]
    cases = conformance.collect(sets, sample=args.sample, ops=set(args.op) if args.op else None)
    results = conformance.run(cases, jobs=args.jobs, timeout_s=args.timeout, progress=not args.quiet)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(conformance.markdown(results))
    doc = {"summary": conformance.summary(results), "by_op": conformance.by_op(results), "cases": results}
    if args.json:
        return doc
    s = doc["summary"]
    print(f"{s['cases']} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items())))
    for line in conformance.summary_lines(s):
        print(line)
    if args.markdown:
        print(f"table by op type written to {args.markdown}")
    return None


def cmd_bench(args):
    if args.compare:
        return _bench_compare(args)
    if not args.model:
        from xcomp.errors import UserError

        raise UserError("bench needs a model (or --compare A.json B.json)")
    if args.block < 2:
        from xcomp.errors import UserError

        raise UserError(f"--block {args.block}: a block needs 2 or more runs (its first follows another runner)")
    return _bench_report(args, args.target or ["cpu"])


def _default_baselines(args):
    """onnxruntime; torch eager too (its entry says what it needs when it cannot run); torch.compile only for a
    program the user gave, since compiling takes a while; onnxruntime's GPU provider of each GPU target's kind."""
    targets = args.target or ["cpu"]
    gpu = [f"onnxruntime-{kind}" for kind in ("cuda", "rocm") if any(t.startswith(kind) for t in targets)]
    return ["onnxruntime", "torch"] + (["torch.compile"] if args.torch_model else []) + gpu


def _bench_report(args, targets):
    """Every target measured here, imported from --results, or predicted (labelled); report files on --report.
    The per-group profile and the BLAS rows (a minute or more on a large model) only when a report is written."""
    from xcomp.report import collect_report, write_report
    from xcomp.report.tables import latency_table

    detail = bool(args.report)
    report = collect_report(_model_arg(args.model), targets=targets,
                            baselines=args.baseline or _default_baselines(args), input_shapes=_input_shapes(args),
                            input_values=_input_values(args), db=args.db, results=args.results or [],
                            warmup=args.warmup, repeat=args.repeat, seed=args.seed, model_label=args.model,
                            argv=args.argv, progress=not args.quiet, profile_groups=detail, blas=detail,
                            torch_model=args.torch_model, block=args.block, costmodel=args.costmodel,
                            tf32=args.tf32)
    paths = write_report(report, args.report) if args.report else None
    if args.json:
        return report
    table = latency_table(report)
    print(f"{args.model}: {len(report['targets'])} target(s), median of {args.repeat} steady runs "
          f"(in alternating blocks of {args.block})")
    print(_table(table.rows, table.headers))
    for b in report["baselines"]:
        if b.get("status") != "measured":
            print(f"baseline {b['name']}: {b['status']} ({b.get('reason', '')})")
    if any(t["status"] == "predicted" for t in report["targets"]):
        print("predicted: from the target's HardwareSpec roofline, calibrated with runs measured on that kind of "
              "device where there are some (docs/gpu-results.md); not a measurement")
    for note in report["notes"]:
        print(f"note: {note}")
    if paths:
        print(f"report written to {paths['html']} (also {os.path.basename(paths['md'])}, "
              f"{os.path.basename(paths['json'])}, {len(paths['charts'])} PNG chart(s))")
    return None


def _bench_compare(args):
    from xcomp.report import compare_reports, load_report, write_compare
    from xcomp.report.compare import render_compare_text

    a_path, b_path = args.compare
    comparison = compare_reports(load_report(a_path), load_report(b_path), threshold=args.threshold / 100,
                                 a_name=os.path.basename(os.path.dirname(os.path.abspath(a_path))) + "/"
                                 + os.path.basename(a_path),
                                 b_name=os.path.basename(os.path.dirname(os.path.abspath(b_path))) + "/"
                                 + os.path.basename(b_path))
    paths = write_compare(comparison, args.report) if args.report else None
    if args.json:
        return comparison
    print(render_compare_text(comparison), end="")
    if paths:
        print(f"comparison written to {paths['html']} (also compare.md, compare.json)")
    return None


# -- parser ---------------------------------------------------------------------------------------------------


def build_parser():
    import xcomp

    parser = argparse.ArgumentParser(
        prog="xcomp",
        description="xcomp compiles ONNX models into fast CPU, CUDA and ROCm modules.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"xcomp {xcomp.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p, target=True, shapes=True):
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="every log line (TVM's warnings each time, not once per kind with a count)")
        if target:
            p.add_argument("-t", "--target", default="cpu", help="target to compile for (default: cpu, this host)")
        if shapes:
            p.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                           help="specialize an input's symbolic dims, e.g. data=1,3,224,224 (repeatable; "
                                "default: they stay symbolic and one module serves every size; `run` of a "
                                ".xc: the size of random inputs, symbolic dims otherwise 1)")
            p.add_argument("--input-value", action="append", metavar="NAME=V1,V2,...|NAME=FILE.npy",
                           help="fix an input that sets shapes (a ReduceSum's axes, a Resize's scales) to this "
                                "value at compile time; compile names the inputs that need one (repeatable)")

    def no_costmodel(p, when=""):
        p.add_argument("--no-costmodel", dest="costmodel", action="store_false",
                       help=f"{when}groups without --db records get their template's default config; without this "
                       "flag they get the shipped cost model's predicted fastest config wherever its held-out "
                       "evidence trusts that template on this kind of hardware (the notes say how many; "
                       "docs/decisions/zero-measurement-compile.md)")

    def tf32(p, when=""):
        p.add_argument("--tf32", action="store_true",
                       help=f"{when}NVIDIA: float32 matmuls and convs run on TF32 matrix cores (operands rounded to "
                       "tf32, float32 sums; faster, about 3 decimal digits per operand); default: float32 math. "
                       "A note says which math the build used; on CPUs and ROCm it changes nothing")

    p = sub.add_parser("compile", help="compile a model to a .xc module file",
                       description="Compile an ONNX model for a target and save it as one .xc file.")
    p.add_argument("model", help="path to .onnx, or onnx:NAME")
    p.add_argument("-o", "--output", help="output file (default: MODEL.xc in the current folder)")
    p.add_argument("--emit-source", metavar="DIR", help="also write generated code (LLVM IR/asm, CUDA, PTX, AMDGPU)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="CUDA: replay the kernels as CUDA graphs (one launch per graph instead of one per kernel; "
                   "static shapes; captured on the first run)")
    p.add_argument("--db", metavar="TUNE.sqlite", help="use the fastest configs recorded by `xcomp tune`")
    no_costmodel(p)
    tf32(p)
    common(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a compiled (.xc) or ONNX model on inputs",
                       description="Run a model. Inputs: NAME=file.npy (repeatable) or one .npz; random if none.")
    p.add_argument("model", help=".xc file from `xcomp compile`, or an .onnx model (compiled first)")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy|FILE.npz")
    p.add_argument("--output", metavar="FILE.npz", help="save the outputs")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--db", metavar="TUNE.sqlite", help="when compiling an .onnx: use tuned configs")
    no_costmodel(p, "when compiling an .onnx: ")
    tf32(p, "when compiling an .onnx: ")
    common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("tune", help="tune a model's operator groups, recording every measurement",
                       description="Search each unique operator group's knob space (cost-model guided), measuring "
                                   "candidates in isolated processes, then measure each group's 3 fastest "
                                   "configs and its default once more (a few seconds per group, after --time runs "
                                   "out), keeping the slower run of each, until the fastest has been measured "
                                   "twice. On a CPU each timed run starts as it would inside the model: the group's "
                                   "weights and output out of the cores' own caches (only those, when the model's "
                                   "weights fit the last-level cache; else flushed to memory), its data input "
                                   "just written by every thread. Last (measuring here), the model is built with each "
                                   "group's default and once per rank of its --in-model-top - 1 fastest other configs, "
                                   "and each group's configs are timed inside those builds, where what the rest of "
                                   "the model leaves in the caches counts too; compile --db then uses a tuned config "
                                   "only where it beat the default there in every round, and the default elsewhere. "
                                   "Every measured batch is committed to the "
                                   "database: an interrupted run keeps everything and a rerun resumes.")
    p.add_argument("model", help="path to .onnx, or onnx:NAME")
    p.add_argument("--db", default="tune.sqlite", help="tuning database (created if missing; default tune.sqlite)")
    p.add_argument("--trials", type=int, help="total measured candidates, besides each group's default, which is "
                                              "always measured first (default 64 per unique group)")
    p.add_argument("--time", help="time budget instead of (or with) --trials: 90s, 10m, 1h")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    p.add_argument("--in-model-top", type=int, default=4, metavar="N",
                   help="time each group's default and N-1 fastest other configs inside the model, and keep a tuned "
                        "one only where it beats the default there (default 4: a minute or two for resnet50, 4 builds "
                        "of it; 0: choose by the times alone, where a tuned config may lose to the default)")
    p.add_argument("--runner", choices=["local", "bundle", "rpc"], default="local",
                   help="where candidates are measured: local (this machine, default); bundle (written to "
                        "--bundle-dir, measured by its run.py on another machine, imported by the next run: one "
                        "batch per group per round trip); rpc (a machine behind a tvm.rpc tracker)")
    p.add_argument("--bundle-dir", metavar="DIR", help="--runner bundle: the folder carried to the measuring machine")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="--runner rpc: the tvm.rpc tracker")
    p.add_argument("--rpc-key", metavar="KEY", help="--runner rpc: the device key servers registered with")
    common(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("db", help="export / import tuning records as JSONL (share between machines)",
                       description="Move tuning records between machines: export to JSONL, import from JSONL "
                                   "(records already present are skipped), or import-results of a measured "
                                   "bundle folder (xcomp tune --runner bundle).")
    p.add_argument("action", choices=["export", "import", "import-results"])
    p.add_argument("db", help="tuning database (.sqlite)")
    p.add_argument("file", help="JSONL file to write (export) or read (import); bundle folder (import-results)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("info", help="show ops, operator groups and unsupported nodes of a model",
                       description="Show a model's ops, how it partitions into operator groups, and what is "
                                   "unsupported.")
    p.add_argument("model", help="path to .onnx, or onnx:NAME")
    common(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("conformance", help="run ONNX backend tests through xcomp and onnxruntime",
                       description="Run ONNX backend test cases (node tests, shipped models) through xcomp and "
                                   "onnxruntime, each case in its own process with a timeout; report pass / "
                                   "unsupported / wrong / error / crash / timeout by op type.")
    p.add_argument("--set", action="append", choices=["node", "light", "pytorch-converted", "pytorch-operator",
                                                      "simple"], help="test sets (default: all; repeatable)")
    p.add_argument("--sample", action="store_true", help="node tests: one case per op type, the first by name")
    p.add_argument("--op", action="append", help="only cases whose first node is this op type (repeatable)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases run at once (default: cores)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    p.add_argument("--markdown", metavar="FILE.md", help="write the table by op type and every failing case")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_conformance)

    from xcomp.report.bench import BLOCK

    p = sub.add_parser("bench", help="time a model on targets against baselines; write a report",
                       description="Compile a model, then time it and each baseline on the same random inputs, "
                                   "taking turns in blocks of back-to-back runs; print steady-state medians, spread "
                                   "and the speed against onnxruntime for every -t target (measured here, imported "
                                   "from --results, or predicted from its HardwareSpec and labelled so); --json "
                                   "prints that as the report document. With --report: also the per-group profile "
                                   "and BLAS for GEMM groups, written with charts as report.json/.md/.html. With "
                                   "--compare: the change between two report.json files.")
    p.add_argument("model", nargs="?", help="path to .onnx, or onnx:NAME")
    p.add_argument("-t", "--target", action="append",
                   help="target (repeatable; default cpu): measured when present here, otherwise taken from "
                        "--results or predicted")
    p.add_argument("--baseline", action="append",
                   choices=["onnxruntime", "onnxruntime-cuda", "onnxruntime-rocm", "torch", "torch.compile"],
                   help="baseline to compare against (repeatable; default: onnxruntime and torch, "
                        "torch.compile with --torch-model, and onnxruntime-cuda / onnxruntime-rocm (its CUDA / "
                        "ROCm execution provider) with a cuda / rocm target; a baseline that cannot run here is "
                        "listed with the reason)")
    p.add_argument("--torch-model", metavar="MODEL.pt2",
                   help="the same model as a torch program, saved by torch.export.save(torch.export.export(net, "
                        "args), 'MODEL.pt2'): run by the torch (eager) and torch.compile baselines, with the ONNX "
                        "model's inputs in order; without it torch needs onnx2torch to convert the ONNX model")
    p.add_argument("--db", metavar="TUNE.sqlite", help="compile with tuned configs; the report shows tuning curves")
    no_costmodel(p, "compiling the targets measured here: ")
    tf32(p, "compiling the targets measured here: ")
    p.add_argument("--report", metavar="DIR", help="write report.json, report.md, report.html and PNG charts here")
    p.add_argument("--results", action="append", metavar="REPORT.json",
                   help="measured results from another machine (its report.json), for targets not present here")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="show what changed from report A to report B (with --report DIR: also write it there)")
    p.add_argument("--threshold", type=float, default=5.0,
                   help="--compare: slower by more than this percent is a regression (default 5)")
    p.add_argument("--repeat", type=int, default=30, help="timed steady runs of each runner (default 30)")
    p.add_argument("--block", type=int, default=BLOCK,
                   help=f"runs per block (default {BLOCK}): runners take turns running blocks, a pause between; "
                        "each block's first run follows another runner's and is shown apart ('after switch')")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs of each runner first (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed for the random inputs (default 0)")
    common(p, target=False)
    p.set_defaults(func=cmd_bench)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each record (xcomp.native points it elsewhere while it captures fd 2)."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def _setup_logging(verbose):
    """xcomp's log records on stderr as `xcomp.tvm: warning: ...`; -v: every record, DEBUG up."""
    logger = logging.getLogger("xcomp")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):  # main() may run more than once
        handler = _StderrHandler()
        handler.setFormatter(_LowerLevelFormatter("%(name)s: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False


class _LowerLevelFormatter(logging.Formatter):
    """`warning:` as in the CLI's `error:` lines."""

    def format(self, record):
        record.levelname = record.levelname.lower()
        return super().format(record)


def main(argv=None) -> int:
    from xcomp.errors import XcompError

    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = ["xcomp"] + list(sys.argv[1:] if argv is None else argv)  # recorded in reports, to reproduce
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    _setup_logging(getattr(args, "verbose", False))
    try:
        result = args.func(args)
    except XcompError as err:
        print(f"xcomp {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"xcomp {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: one line for the user, the traceback on request
        if os.environ.get("XCOMP_DEBUG"):
            raise
        print(f"xcomp {args.command}: internal error: {type(err).__name__}: {err} "
              "(set XCOMP_DEBUG=1 for a traceback; please report it)", file=sys.stderr)
        return 2
    if args.json and result is not None:
        json.dump(result, sys.stdout, indent=2, default=str)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
