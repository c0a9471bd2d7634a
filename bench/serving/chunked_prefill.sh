#!/usr/bin/env bash
# Serving benchmark 3: chunked-prefill token budget (--max_num_batched_tokens)
# vs the inter-token latency of running requests while long prompts arrive.
#
# Per budget, a fresh daemon and two kvserve-loadgen runs at once:
#   decode  DECODE_STREAMS closed-loop streams of short prompts and long
#           outputs: the "running requests" whose ITL we watch;
#   long    NUM_LONG prompts of LONG_PROMPT_LEN tokens arriving (Poisson,
#           LONG_RATE req/s) one second after the decode load started.
# Each engine step computes at most `budget` tokens: decodes (one token each)
# plus a chunk of a waiting prompt. A small budget splits a long prompt into
# many short steps (decode ITL stays low, the long prompt's TTFT grows); a
# large one prefills it in one long step that stalls every running decode.
#
# Results: bench/results/chunked_prefill/{decode,long}-<budget>.{json,csv,txt}, table.md
# Knobs: BUDGETS (32,128,512,2048), DECODE_STREAMS (4), DECODE_OUTPUT (160),
# LONG_PROMPT_LEN (512), NUM_LONG (3), LONG_RATE (0.5), MODEL (builtin:small).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

BUDGETS="${BUDGETS:-32,128,512,2048}"
DECODE_STREAMS="${DECODE_STREAMS:-4}"
DECODE_OUTPUT="${DECODE_OUTPUT:-160}"
LONG_PROMPT_LEN="${LONG_PROMPT_LEN:-512}"
NUM_LONG="${NUM_LONG:-3}"
LONG_RATE="${LONG_RATE:-0.5}"
MODEL="${MODEL:-builtin:small}"

out="$(results_dir chunked_prefill)"
decode_rows=()
long_rows=()
for budget in ${BUDGETS//,/ }; do
  echo "== max_num_batched_tokens=$budget =="
  start_daemon "$out/kvserve-$budget" --model="$MODEL" --max_num_batched_tokens="$budget"
  loadgen "$out/decode-$budget" --progress=false --num_requests="$DECODE_STREAMS" \
    --concurrency="$DECODE_STREAMS" --prompt_len=16 --output_len="$DECODE_OUTPUT" --seed=1 \
    >/dev/null &
  decode_pid=$!
  sleep 1
  loadgen "$out/long-$budget" --progress=false --num_requests="$NUM_LONG" \
    --request_rate="$LONG_RATE" --prompt_len="$LONG_PROMPT_LEN" --output_len=4 --seed=2 >/dev/null
  wait "$decode_pid"
  stop_daemon
  decode_rows+=("budget=$budget=$out/decode-$budget.json")
  long_rows+=("budget=$budget=$out/long-$budget.json")
done

echo
echo "== chunked prefill, $MODEL: decode load ($DECODE_STREAMS streams, output $DECODE_OUTPUT) while" \
  "$NUM_LONG prompts of $LONG_PROMPT_LEN tokens arrive at $LONG_RATE req/s (ms) =="
echo "-- running (decode) requests --"
"$PYTHON" "$TABLE" --md "$out/table-decode.md" \
  --cols done,failed,out_tok_s,itl_p50,itl_p99,itl_max,tpot_p50,tpot_p99,e2e_p50 "${decode_rows[@]}"
echo "-- long-prompt requests --"
"$PYTHON" "$TABLE" --md "$out/table-long.md" \
  --cols done,failed,ttft_p50,ttft_p99,e2e_p50,e2e_p99 "${long_rows[@]}"
cat "$out/table-decode.md" "$out/table-long.md" >"$out/table.md"
plot "$out" $(for b in ${BUDGETS//,/ }; do echo "--json $out/decode-$b.json --label decode-b$b"; done) \
  --title "decode load under long-prompt arrivals, per token budget"
echo "results: $out"
