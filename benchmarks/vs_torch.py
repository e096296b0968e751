"""xcomp against PyTorch eager, torch.compile and onnxruntime on the models of tools/make_user_models.py.

Usage: python benchmarks/vs_torch.py [--repeat 50] [--json out.json] [model ...]   (needs torch==2.13.0)

Each model is built and seeded as tools/make_user_models.py does, exported twice from the same weights (ONNX,
opset 17, static shapes; a torch.export program), and timed by `xcomp bench --torch-model` in its own
subprocess: all four runners taking turns in blocks on the same inputs. Ratios are the runner's median over xcomp's
(> 1: xcomp is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNERS = ("onnxruntime", "torch", "torch.compile")


def _user_models():
    spec = importlib.util.spec_from_file_location("make_user_models",
                                                  os.path.join(HERE, os.pardir, "tools", "make_user_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export_pair(tools, name, folder):
    """(model.onnx, model.pt2) of one model, the same seeded weights in both."""
    import torch

    factory, make_inputs, in_names, out_names, _dynamic = tools.build_models()[name]
    torch.manual_seed(tools.SEED)
    model = factory().eval()
    tools._randomise(model, tools.SEED)
    args = make_inputs()
    onnx_path, pt2_path = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}.pt2")
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buffer, opset_version=17, dynamo=False, input_names=in_names,
                          output_names=out_names, do_constant_folding=True)
        torch.export.save(torch.export.export(model, args), pt2_path)
    with open(onnx_path, "wb") as f:
        f.write(buffer.getvalue())
    return onnx_path, pt2_path


def bench(onnx_path, pt2_path, repeat):
    cmd = [sys.executable, "-m", "xcomp", "bench", onnx_path, "--torch-model", pt2_path, "--json", "-q",
           "--repeat", str(repeat)] + [a for r in RUNNERS for a in ("--baseline", r)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    report = json.loads(proc.stdout)
    row = {"xcomp_ms": report["targets"][0]["latency"]["median_ms"],
           "xcomp_first_run_s": report["targets"][0]["first_run"]["total_s"]}
    for b in report["baselines"]:
        if b["status"] == "measured":
            row[f"{b['name']}_ms"] = b["latency"]["median_ms"]
            row[f"{b['name']}_first_run_s"] = b["first_run_s"]
            row[f"{b['name']}_over_xcomp"] = b["latency"]["median_ms"] / row["xcomp_ms"]
        else:
            row[f"{b['name']}_error"] = f"{b['status']}: {b.get('reason', '')}"
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="model names from tools/make_user_models.py (default: all)")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    tools = _user_models()
    names = args.models or sorted(tools.build_models())
    rows = []
    print(f"{'model':18s} {'xcomp':>9s} " + " ".join(f"{r:>22s}" for r in RUNNERS)
          + "   (median ms, and / xcomp)", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            try:
                row = {"model": name, **bench(*export_pair(tools, name, folder), args.repeat)}
            except Exception as err:  # one model's failure must not hide the others' numbers
                row = {"model": name, "error": f"{type(err).__name__}: {err}"}
                print(f"{name:18s} ERROR {row['error']}", flush=True)
                rows.append(row)
                continue
            cells = [f"{row[f'{r}_ms']:8.3f} ({row[f'{r}_over_xcomp']:5.2f}x)" if f"{r}_ms" in row
                     else f"{'n/a':>22s}" for r in RUNNERS]
            print(f"{name:18s} {row['xcomp_ms']:9.3f} " + " ".join(f"{c:>22s}" for c in cells), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
