#!/usr/bin/env bash
# Run HERE (no GPU needed), in the repo root: download the cp312 wheels the GPU image lacks (TVM, its ffi pin,
# xgboost, psutil), pack them into parts under .stage/ small enough for the device tool's 64 MiB per call,
# and record their checksum. The GPU image already has numpy, scipy, onnx, onnxruntime, torch.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .git/info && grep -qx '/.stage/' .git/info/exclude 2>/dev/null || echo /.stage/ >> .git/info/exclude
rm -rf .stage && mkdir -p .stage/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .stage/wheels \
  apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 xgboost-cpu psutil tqdm
cd .stage
tar cf wheels.tar wheels
sha256sum wheels.tar > SHA256SUMS
split -b 53M -a 2 wheels.tar part.
for part in part.*; do mkdir -p "p_${part#part.}" && mv "$part" "p_${part#part.}/"; done
cp SHA256SUMS p_aa/
rm -rf wheels wheels.tar
ls -la .stage/* 2>/dev/null || ls -la
echo "carry each .stage/p_XX folder in its own device call: bash tools/gpu/stage.sh .stage/p_XX;"
echo "after the last one: bash tools/gpu/install.sh"
