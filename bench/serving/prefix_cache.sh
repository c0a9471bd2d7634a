#!/usr/bin/env bash
# Serving benchmark 2: prefix cache on vs off on a shared-prefix workload.
#
# Requests in NUM_GROUPS groups share a PREFIX_LEN-token prefix (a system
# prompt) and add OWN_LEN tokens of their own. With --enable_prefix_caching
# the first request of a group computes the prefix and the others reuse its
# KV blocks: TTFT drops to the cost of the own tokens. The same workload
# (same seed) runs on a fresh daemon each time.
#
# Results: bench/results/prefix_cache/{on,off}.{json,csv,txt}, latency_cdf.png, table.md
# Knobs: PREFIX_LEN (384), NUM_GROUPS (2), OWN_LEN (16), OUTPUT_LEN (8),
# NUM_REQUESTS (16), CONCURRENCY (2), MODEL (builtin:small).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PREFIX_LEN="${PREFIX_LEN:-384}"
NUM_GROUPS="${NUM_GROUPS:-2}"
OWN_LEN="${OWN_LEN:-16}"
OUTPUT_LEN="${OUTPUT_LEN:-8}"
NUM_REQUESTS="${NUM_REQUESTS:-16}"
CONCURRENCY="${CONCURRENCY:-2}"
MODEL="${MODEL:-builtin:small}"

out="$(results_dir prefix_cache)"
for mode in on off; do
  caching=true
  [[ $mode == off ]] && caching=false
  echo "== prefix caching $mode =="
  start_daemon "$out/kvserve-$mode" --model="$MODEL" --enable_prefix_caching=$caching
  loadgen "$out/$mode" --num_requests="$NUM_REQUESTS" --concurrency="$CONCURRENCY" \
    --shared_prefix_len="$PREFIX_LEN" --num_prefix_groups="$NUM_GROUPS" \
    --prompt_len="$OWN_LEN" --output_len="$OUTPUT_LEN" --seed=1
  stop_daemon
done

plot "$out" --json "$out/on.json" --json "$out/off.json" --label cache-on --label cache-off \
  --title "prefix cache on/off, $MODEL, prefix $PREFIX_LEN x $NUM_GROUPS groups"
echo
echo "== prefix cache: $MODEL, $NUM_REQUESTS requests, concurrency $CONCURRENCY, prefix $PREFIX_LEN" \
  "tokens x $NUM_GROUPS groups + $OWN_LEN own, output $OUTPUT_LEN (ms) =="
"$PYTHON" "$TABLE" --md "$out/table.md" \
  --cols done,failed,req_s,tot_tok_s,ttft_p50,ttft_p99,e2e_p50,e2e_p99,hit_ratio,cached_ratio \
  "cache-on=$out/on.json" "cache-off=$out/off.json"
echo "results: $out"
