#!/usr/bin/env bash
# One call's worth of GPU checks (a session lent a GPU: device `run`, PYTHONPATH=.): the tests
# that skip without CUDA, then the benchmarks with --device cuda. Each step has its own time
# limit so one slow step leaves the others their time; logs go to $OUT (or ./cuda-logs).
set -u
out="${OUT:-cuda-logs}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2
    shift 2
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "   exit $? · $(tail -n 1 "$out/$name.log")"
}
step 200 cuda-tests python3 -m pytest -q -p no:cacheprovider -p no:qt -o addopts="-ra" \
    tests/kinds/vit/test_device_analysis.py tests/modelcode/test_modelcode_capture.py tests/kinds/swin/test_swin_explain.py \
    tests/training/test_training_device_data.py tests/checkpoints/test_device_families.py
step 120 analysis_overhead python3 benchmarks/analysis_overhead.py --device cuda
step 90 swin python3 benchmarks/swin.py --device cuda
step 90 batch_explain python3 benchmarks/batch_explain.py --device cuda
step 60 rollout python3 benchmarks/rollout.py --device cuda
for f in "$out"/*.log; do echo "---- $f"; tail -n 25 "$f"; done
