"""The light-model table: compile time, xcomp latency, onnxruntime latency and their ratio, per model.

Usage: python benchmarks/light_models.py [--repeat 20] [--db tune.sqlite] [--json out.json] [model ...]
Each model runs in its own subprocess (`xcomp bench --json`), so one model's memory does not sway the next.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from xcomp.frontends.examples import shipped_models


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="light model names (default: all nine)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--db", help="tuning database to compile with")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    names = args.models or sorted(n for n in shipped_models() if n.startswith("light_"))
    rows = []
    for name in names:
        cmd = [sys.executable, "-m", "xcomp", "bench", f"onnx:{name}", "--baseline", "onnxruntime", "--json", "-q",
               "--repeat", str(args.repeat)]
        if args.db:
            cmd += ["--db", args.db]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append({"model": name, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"})
            print(f"{name:24s} ERROR {rows[-1]['error']}", flush=True)
            continue
        report = json.loads(proc.stdout)
        target = report["targets"][0]
        ort = next(b for b in report["baselines"] if b["name"] == "onnxruntime")
        row = {
            "model": name,
            "compile_s": target["first_run"]["compile_s"],
            "xcomp_ms": target["latency"]["median_ms"],
            "onnxruntime_ms": ort["latency"]["median_ms"],
            "ratio": target["latency"]["median_ms"] / ort["latency"]["median_ms"],
            "max_abs_diff": target["check"]["max_abs_diff"],
        }
        rows.append(row)
        print(f"{name:24s} compile {row['compile_s']:6.1f}s  xcomp {row['xcomp_ms']:9.2f} ms  "
              f"ort {row['onnxruntime_ms']:9.2f} ms  ratio {row['ratio']:5.2f}  diff {row['max_abs_diff']:.1e}",
              flush=True)
    ok = [r for r in rows if "ratio" in r]
    if ok:
        import math

        geo = math.exp(sum(math.log(r["ratio"]) for r in ok) / len(ok))
        print(f"geometric-mean xcomp/onnxruntime latency ratio over {len(ok)} models: {geo:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
