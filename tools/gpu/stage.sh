#!/usr/bin/env bash
# Run ON THE DEVICE with one part folder carried: appends it to /root/stage/.
# usage: bash tools/gpu/stage.sh .stage/p_aa
set -euo pipefail
src=${1:?usage: stage.sh PART_FOLDER}
mkdir -p /root/stage
cp "$src"/* /root/stage/
ls -la /root/stage
