#!/usr/bin/env bash
# Run ON THE DEVICE after every part was staged: join, verify, install TVM & co into /root/tvmenv, install this
# repo there too, and write /root/tvmenv/env.sh for later calls on the same warm machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd /root/stage
cat part.* > wheels.tar
sha256sum -c SHA256SUMS
rm -rf wheels && tar xf wheels.tar
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /root/tvmenv wheels/*.whl
# libtvm_runtime_cuda.so needs libcudart.so.13; without it TVM silently loads without CUDA.
cudart=$( (ls /usr/local/cuda/lib64/libcudart.so.13 2>/dev/null; find /usr/local /opt -name 'libcudart.so.13' 2>/dev/null) | head -1 || true)
cat > /root/tvmenv/env.sh <<EOS
export PYTHONPATH=/root/tvmenv:$repo\${PYTHONPATH:+:\$PYTHONPATH}
export LD_LIBRARY_PATH=${cudart:+$(dirname "$cudart"):}\${LD_LIBRARY_PATH:-}
export PATH=\$PATH:/usr/local/cuda/bin
EOS
source /root/tvmenv/env.sh
python3 -c "import tvm, xcomp; d = tvm.cuda(0); print('tvm', tvm.__version__, 'cuda', d.exist, d.device_name if d.exist else '')"
