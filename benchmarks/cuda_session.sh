#!/usr/bin/env bash
# One call's worth of GPU checks (a session lent a GPU: device `run`, PYTHONPATH=.): the
# benchmarks with --device cuda, a profile of the analysis, then the tests that skip without
# CUDA. Each step has its own time limit, cut to what is left of BUDGET seconds (default 420),
# so one slow step leaves the others their time and the call ends in time; logs go to $OUT (or
# ./cuda-logs) and a summary of every table to $OUT/summary.txt.
#   bash benchmarks/cuda_session.sh            # everything, in order of priority
#   STEPS="analysis swin" bash benchmarks/cuda_session.sh   # only some groups
set -u
out="${OUT:-cuda-logs}"
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
budget="${BUDGET:-420}"
steps="${STEPS:-analysis swin clip batch memory train rollout profile interventions tests}"
started=$SECONDS
summary="$out/summary.txt"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import torch, timm, transformers; print('torch', torch.__version__, '· timm', \
timm.__version__, '· transformers', transformers.__version__)"
} 2>&1 | tee "$summary"

step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2 left
    shift 2
    left=$((budget - (SECONDS - started)))
    if ((left < 15)); then
        echo "== $name: skipped, ${left}s of the budget left" | tee -a "$summary"
        return
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    {
        echo "== $name: exit $rc in $((SECONDS - t0)) s"
        grep -E '^(#|\||device:|TARGET|WRONG|all targets|\(b\) ViT-L)' "$out/$name.log"
        tail -n 3 "$out/$name.log"
        echo
    } >>"$summary"
    echo "   exit $rc in $((SECONDS - t0)) s · $(tail -n 1 "$out/$name.log")"
}
wants() { [[ " $steps " == *" $1 "* ]]; }

if wants large; then  # the largest case alone, with a small one beside it as its baseline
    step 60 overhead-vit-large-518 python3 benchmarks/analysis_overhead.py --device cuda --no-check \
        --model vit-large --image-size 518 --patch-size 14 --repeats 10 --warmup 3
    step 45 overhead-vit-base-224 python3 benchmarks/analysis_overhead.py --device cuda --no-check \
        --model vit-base --repeats 10 --warmup 3
fi
if wants analysis; then
    for m in "vit-small 224 16" "vit-small 384 16" "vit-base 224 16" "vit-base 384 16" \
        "vit-large 224 16" "vit-large 384 16" "vit-large 518 14"; do
        set -- $m
        step 60 "overhead-$1-$2" python3 benchmarks/analysis_overhead.py --device cuda --no-check --model "$1" --image-size "$2" \
            --patch-size "$3" --repeats 10 --warmup 3
    done
    step 60 overhead-eva02-tiny python3 benchmarks/analysis_overhead.py --device cuda --no-check --model eva02-tiny --repeats 10 --warmup 3
    step 60 overhead-beit-base python3 benchmarks/analysis_overhead.py --device cuda --no-check --model beit-base --repeats 10 --warmup 3
fi
wants swin && step 60 swin python3 benchmarks/swin.py --device cuda --no-check --repeats 10
wants clip && step 60 clip python3 benchmarks/clip.py --device cuda --no-check --repeats 10
wants batch && step 60 batch_explain python3 benchmarks/batch_explain.py --device cuda --no-check
wants memory && step 60 analysis_memory python3 benchmarks/analysis_memory.py --device cuda --no-check
if wants train; then
    step 60 train-eager python3 benchmarks/train_throughput.py --device cuda --no-check --compile off --steps 200
    step 150 train-compile python3 benchmarks/train_throughput.py --device cuda --no-check --compile on --steps 200
fi
# the per-layer plan (e) and the multi-layer plan (g) of the head effects in one run, with
# the multi-layer plan's grouping at three more launch costs (1000: every head in one pass)
wants interventions && step 120 ablation python3 benchmarks/ablation.py --device cuda --no-check \
    --variant vit-base --launch 2,16,1000
wants rollout && step 45 rollout python3 benchmarks/rollout.py --device cuda --no-check
if wants profile; then
    step 45 profile-vit-base python3 benchmarks/analysis_profile.py --device cuda --cases a,b,c
    step 45 profile-vit-large-518 python3 benchmarks/analysis_profile.py --device cuda \
        --model vit-large --image-size 518 --patch-size 14 --cases a,b --repeats 5
fi
# every test that skips without CUDA (named for the device or in a device test module)
wants tests && step 200 cuda-tests python3 -m pytest -q -p no:cacheprovider -p no:qt \
    -o addopts="-ra" -k "cuda or device or gpu" tests/kinds/vit/test_device_analysis.py \
    tests/modelcode/test_modelcode_capture.py tests/kinds/swin/test_swin_explain.py \
    tests/training/test_training_device_data.py tests/checkpoints/test_device_families.py \
    tests/modelcode/test_modelcode_heads.py tests/modelcode/test_modelcode_tutorials.py \
    tests/pipeline/test_device_interventions.py
echo "== done in $((SECONDS - started)) s" | tee -a "$summary"
tar -czf "$out/logs.tar.gz" -C "$out" --exclude=logs.tar.gz . 2>/dev/null || true
