#!/usr/bin/env bash
# Run ON THE DEVICE after install.sh, in the same call or a later one on the warm machine: the GPU tests, then the
# GPU benchmark suite (benchmarks/gpu_suite.py), then the tuning bundles waiting in tools/gpu/bundles/ for what is
# left of the call (tools/gpu/bundles.py run). Everything lands in $OUT as at most 8 files (the device tool's
# limit): the logs, the suite's JSON, one tarball of the generated code, one of the bundles' results.
# usage: bash tools/gpu/run_all.sh COMMIT [SUITE ARGS...]   (env: TESTS_TIMEOUT_S=150, SUITE_BUDGET_S=300,
#        TESTS="tests/" to narrow the GPU tests; CALL_BUDGET_S=520: the seconds this script may use, 600 less
#        staging and install in the same call; BUNDLES_BUDGET_S: the bundles' share, default what is left of it)
set -uo pipefail
commit=${1:-unknown}
shift || true
out=${OUT:?run this on the device, where OUT is set}
source /root/tvmenv/env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$out/nvidia-smi.csv"
# whole light models last: they compile longest (densenet121 77 s), and a cut should cost them, not the kernels
tests=${TESTS:-$(ls tests/test_*.py | grep -v '/test_models.py$') tests/test_models.py}
timeout "${TESTS_TIMEOUT_S:-150}" python3 -m pytest -m gpu $tests -q -p no:cacheprovider 2>&1 \
  | tee "$out/pytest-gpu.log"
work=/tmp/gpu_suite
python3 benchmarks/gpu_suite.py --out "$work" --commit "$commit" --budget-s "${SUITE_BUDGET_S:-300}" "$@" 2>&1 \
  | tee "$out/gpu_suite.log"
cp "$work/gpu_suite.json" "$out/" 2>/dev/null
tar czf "$out/generated.tar.gz" -C "$work" --exclude='*.onnx' --exclude=gpu_suite.json . 2>/dev/null
# run.py of each bundle goes on where an earlier cut-short run stopped; its log rides inside the tarball
python3 tools/gpu/bundles.py run "$out" --budget-s "${BUNDLES_BUDGET_S:-$(( ${CALL_BUDGET_S:-520} - SECONDS ))}"
ls -la "$out"
