#!/usr/bin/env bash
# Serving benchmark 1: open-loop request-rate sweep on builtin:small.
#
# One daemon; kvserve-loadgen --sweep_rates runs one Poisson phase per rate
# (fresh prompts per phase, so no phase hits the prefix cache of another).
# Throughput follows the offered rate until the server saturates; beyond it
# the queue grows and TTFT / E2E climb.
#
# Results: bench/results/rate_sweep/{sweep.json,sweep.csv,sweep.txt,*.png,table.md}
# Knobs (environment): RATES (default 0.5,1,2,4), NUM_REQUESTS (16 per rate),
# PROMPT_LEN (64), OUTPUT_LEN (32), MODEL (builtin:small).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RATES="${RATES:-0.5,1,2,4}"
NUM_REQUESTS="${NUM_REQUESTS:-16}"
PROMPT_LEN="${PROMPT_LEN:-64}"
OUTPUT_LEN="${OUTPUT_LEN:-32}"
MODEL="${MODEL:-builtin:small}"

out="$(results_dir rate_sweep)"
start_daemon "$out/kvserve" --model="$MODEL"
loadgen "$out/sweep" --sweep_rates="$RATES" --num_requests="$NUM_REQUESTS" \
  --prompt_len="$PROMPT_LEN" --prompt_len_dist=uniform --prompt_len_range=$((PROMPT_LEN / 4)) \
  --output_len="$OUTPUT_LEN" --seed=1 --slo_ttft_ms=2000 --slo_tpot_ms=200
stop_daemon

plot "$out" --json "$out/sweep.json" --title "rate sweep, $MODEL"
echo
echo "== rate sweep: $MODEL, $NUM_REQUESTS requests/rate, prompt ~$PROMPT_LEN, output $OUTPUT_LEN (ms) =="
"$PYTHON" "$TABLE" --md "$out/table.md" \
  --cols rate,done,failed,req_s,out_tok_s,goodput,ttft_p50,ttft_p99,tpot_p50,itl_p99,e2e_p50,e2e_p99 \
  "sweep=$out/sweep.json"
echo "(goodput: req/s with TTFT <= 2000 ms and TPOT <= 200 ms)"
echo "results: $out"
