#!/usr/bin/env bash
# The whole walk (benchmarks/timm_walk.py --transformers) split over N one-thread processes, for a
# machine with many cores; each shard stops taking names after BUDGET seconds. The shards'
# verdicts go to $OUT/walk (or ./walk-logs), the merged table to $OUT/walk_table.txt.
#   SHARDS=14 BUDGET=240 bash benchmarks/walk_shards.sh
set -u
out="${OUT:-walk-logs}"
shards="${SHARDS:-$(nproc)}"
budget="${BUDGET:-600}"
mkdir -p "$out/walk"
export PYTHONPATH=. OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
for ((i = 0; i < shards; i++)); do
    timeout $((budget + 90)) python3 benchmarks/timm_walk.py --transformers --seed 7 \
        --budget "$budget" --shard "$i/$shards" --tsv "$out/walk/$i.tsv" >"$out/walk/$i.log" 2>&1 &
done
wait
python3 benchmarks/timm_walk.py --tally "$out"/walk/*.tsv | tee "$out/walk_table.txt"
grep -h "^walked" "$out"/walk/*.log | tee -a "$out/walk_table.txt"
tar -czf "$out/walk.tar.gz" -C "$out" walk && rm -rf "$out/walk"
