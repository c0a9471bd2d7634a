#!/usr/bin/env bash
# Serving benchmark 4: KV-cache pressure. The same closed-loop workload runs on
# a roomy KV pool and on one too small for the running set (--num_kv_blocks),
# so that the scheduler must preempt (recompute) requests to make progress.
# Checked here: every request still completes (exit status and counts), how
# many preemptions the server counted (kvserve_num_preemptions_total delta),
# and what the recomputation costs in throughput.
#
# One request needs ceil((PROMPT_LEN + OUTPUT_LEN) / 16) blocks at its end
# (block size 16): 10 with the defaults; CONCURRENCY of them need 80, and
# SMALL_BLOCKS (32) holds about three.
#
# Results: bench/results/kv_pressure/{roomy,small}.{json,csv,txt}, latency_cdf.png, table.md
# Knobs: SMALL_BLOCKS (32), CONCURRENCY (8), NUM_REQUESTS (16), PROMPT_LEN (64),
# OUTPUT_LEN (96), MODEL (builtin:small).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SMALL_BLOCKS="${SMALL_BLOCKS:-32}"
CONCURRENCY="${CONCURRENCY:-8}"
NUM_REQUESTS="${NUM_REQUESTS:-16}"
PROMPT_LEN="${PROMPT_LEN:-64}"
OUTPUT_LEN="${OUTPUT_LEN:-96}"
MODEL="${MODEL:-builtin:small}"

out="$(results_dir kv_pressure)"
status=0
for pool in roomy small; do
  blocks=0  # 0: sized from --kv_cache_memory_mb (thousands of blocks)
  [[ $pool == small ]] && blocks=$SMALL_BLOCKS
  echo "== KV pool: $pool (--num_kv_blocks=$blocks) =="
  start_daemon "$out/kvserve-$pool" --model="$MODEL" --num_kv_blocks="$blocks" --block_size=16
  loadgen "$out/$pool" --num_requests="$NUM_REQUESTS" --concurrency="$CONCURRENCY" \
    --prompt_len="$PROMPT_LEN" --output_len="$OUTPUT_LEN" --seed=1
  stop_daemon
  completed="$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["phases"][0]["num_completed"])' "$out/$pool.json")"
  if [[ "$completed" != "$NUM_REQUESTS" ]]; then
    echo "FAIL: $pool pool completed $completed of $NUM_REQUESTS requests" >&2
    status=1
  fi
done

plot "$out" --json "$out/roomy.json" --json "$out/small.json" --label roomy \
  --label "small($SMALL_BLOCKS blocks)" --title "KV pressure, $MODEL"
echo
echo "== KV pressure: $MODEL, $NUM_REQUESTS requests, concurrency $CONCURRENCY, prompt $PROMPT_LEN," \
  "output $OUTPUT_LEN; small pool = $SMALL_BLOCKS blocks of 16 (ms) =="
"$PYTHON" "$TABLE" --md "$out/table.md" \
  --cols done,failed,finished,preemptions,req_s,out_tok_s,ttft_p50,ttft_p99,tpot_p50,e2e_p99 \
  "roomy=$out/roomy.json" "small=$out/small.json"
[[ $status -eq 0 ]] && echo "all requests completed in both runs"
echo "results: $out"
exit $status
