#!/usr/bin/env bash
# Serving benchmark 6: the KV cache formats under memory pressure. The same
# workload (CONCURRENCY requests at once, PROMPT_LEN-token prompts, OUTPUT_LEN
# output tokens) runs once per --kv_cache_dtype at one fixed KV budget
# (--kv_cache_memory_mb=KV_MB), small enough that the fp32 cache cannot hold
# every running request and must preempt (recompute). A smaller format holds
# more tokens in the same bytes (the ready line's capacity), so it preempts less.
# Reported per format: tokens the pool holds, completed requests, preemptions
# (kvserve_num_preemptions_total delta), output tokens/s, TTFT and TPOT.
#
# builtin:small holds 45 KiB of fp32 K/V per token (30 layers x 3 KV heads x
# 64 x 2 x 4 B); 32 x 2,048 tokens need 2.8 GiB at fp32, so the
# default 1,024 MiB holds about a third of them.
#
# Results: bench/results/kv_formats/<format>.{json,csv,txt}, table.md
# Knobs: FORMATS, KV_MB (1024), CONCURRENCY (32), PROMPT_LEN (1984: with the
# output, builtin:small's full 2,048-token context),
# OUTPUT_LEN (64), MODEL (builtin:small).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FORMATS="${FORMATS:-auto bfloat16 float16 fp8_e4m3 int8 int4 fp4_e2m1}"
KV_MB="${KV_MB:-1024}"
CONCURRENCY="${CONCURRENCY:-32}"
PROMPT_LEN="${PROMPT_LEN:-1984}"
OUTPUT_LEN="${OUTPUT_LEN:-64}"
MODEL="${MODEL:-builtin:small}"

out="$(results_dir kv_formats)"
status=0
rows=()
for fmt in $FORMATS; do
  echo "== --kv_cache_dtype=$fmt, --kv_cache_memory_mb=$KV_MB =="
  start_daemon "$out/kvserve-$fmt" --model="$MODEL" --kv_cache_dtype="$fmt" \
    --kv_cache_memory_mb="$KV_MB" --max_model_len=$((PROMPT_LEN + OUTPUT_LEN))
  grep -m1 -o "kv_cache_capacity_tokens=[0-9]*" "$out/kvserve-$fmt.stderr" "$out/kvserve-$fmt.stdout" 2>/dev/null \
    | head -1 || true
  # Random prompts (--prefix_len 0 by default): no prefix-cache hits between requests.
  loadgen "$out/$fmt" --num_requests="$CONCURRENCY" --concurrency="$CONCURRENCY" \
    --prompt_len="$PROMPT_LEN" --output_len="$OUTPUT_LEN" --seed=1
  stop_daemon
  completed="$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["phases"][0]["num_completed"])' "$out/$fmt.json")"
  if [[ "$completed" != "$CONCURRENCY" ]]; then
    echo "FAIL: $fmt completed $completed of $CONCURRENCY requests" >&2
    status=1
  fi
  rows+=("$fmt=$out/$fmt.json")
done

echo
echo "== KV formats: $MODEL, $CONCURRENCY concurrent x ($PROMPT_LEN in, $OUTPUT_LEN out)," \
  "KV budget $KV_MB MiB (ms) =="
"$PYTHON" "$TABLE" --md "$out/table.md" \
  --cols done,failed,preemptions,out_tok_s,tot_tok_s,ttft_p50,ttft_p99,tpot_p50,e2e_p99 "${rows[@]}"
echo "results: $out"
exit $status
