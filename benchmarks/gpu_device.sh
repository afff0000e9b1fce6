#!/usr/bin/env bash
# One call on the lent GPU machine: the carried wheels installed (.whl/, made here by benchmarks/gpu_wheels.py), then
# the GPU check; gpu.json and its log land in $OUT (or reports/bench/ where OUT is unset). Arguments go to the check:
#   bash benchmarks/gpu_device.sh --parts env,8b,mfu,unsloth,pipeline --limit-s 420
# Model folders go to /dev/shm where it has room (the 8B one is 16 GB: memory writes it faster than a disk).
set -u
out=${OUT:-reports/bench}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_device: the carried wheels did not install"; exit 3; }
# compiled once here, in parallel: every process the check starts would otherwise compile them again where the image
# sets PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 /tmp/site >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
free_gb=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)
if [ "${free_gb:-0}" -ge 40 ]; then export TMPDIR=/dev/shm; fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
echo "TMPDIR=${TMPDIR:-/tmp} (/dev/shm free ${free_gb:-?} GB); $(nproc) CPUs"
set -o pipefail
python3 benchmarks/gpu_check.py --runner commands --out "$out/gpu.json" "$@" 2>&1 | tee "$out/gpu.log"
