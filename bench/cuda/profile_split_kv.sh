#!/usr/bin/env bash
# Nsight Compute profiles of the split-KV decode kernels, one launch each, on
# the GPU machine (the next step for issue #15's GPU target: which stall
# keeps the scaled formats at 34-54% of copy, docs/cuda.md).
#
#   bench/cuda/profile_split_kv.sh [FORMAT...]     (default: int8 int4 bfloat16)
#
# Needs the bundle unpacked or packed (bench/cuda/run_on_gpu.sh bundle; carry
# .gpu_carry). Each format's kernel is taken from
# kvserve_cuda_kv_format_decode_bench --quick (batch 64 x 4096, 32 / 8 heads,
# head dim 128): the tensor-core kernel (SplitKvMmaKernel) for the scaled
# formats, the CUDA-core one (SplitKvKernel) for bfloat16 / float16. ncu runs
# with --clock-control none (the clocks are left as they are) and the full
# section set; it skips the first 2 matching launches (warm-up).
# Writes to $OUT (default /tmp/kvserve-ncu): FORMAT.ncu-rep, FORMAT.txt (the
# details page: stall reasons, memory throughput, occupancy) and ncu.log.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$REPO/.gpu_bundle"
OUT_DIR="${OUT:-/tmp/kvserve-ncu}"
mkdir -p "$OUT_DIR"
if [[ ! -d "$BUNDLE/bin" && -f "$REPO/.gpu_carry/bundle.tar.xz" ]]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$REPO/.gpu_carry/bundle.tar.xz" "$REPO" || exit 2
fi
BENCH="$BUNDLE/bin/kvserve_cuda_kv_format_decode_bench"
[[ -x "$BENCH" ]] || {
  echo "profile_split_kv.sh: no $BENCH (build the bundle first)" >&2
  exit 2
}
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"

# The kernel of each format, as a regex over the demangled name. The
# tensor-core kernel is SplitKvMmaKernel<format, head dim>, the format being
# kvserve::kernels::KvDtype's value (kv_quant.h: bf16 1, fp16 2, fp8 3,
# int8 4, int4 5, fp4 6), which the demangler prints as a cast number (or by name); the
# CUDA-core kernel is SplitKvKernel<format, head dim, heads per CTA>.
kernel_regex() {
  case "$1" in
    fp8_e4m3) echo 'SplitKvMmaKernel<[^,]*(\)3|kFp8E4m3), 128>' ;;
    int8) echo 'SplitKvMmaKernel<[^,]*(\)4|kInt8), 128>' ;;
    int4) echo 'SplitKvMmaKernel<[^,]*(\)5|kInt4), 128>' ;;
    fp4_e2m1) echo 'SplitKvMmaKernel<[^,]*(\)6|kFp4E2m1), 128>' ;;
    bfloat16) echo 'SplitKvKernel<[^,]*(\)1|kBfloat16), 128,' ;;
    float16) echo 'SplitKvKernel<[^,]*(\)2|kFloat16), 128,' ;;
    *) return 1 ;;
  esac
}

formats=("$@")
((${#formats[@]} == 0)) && formats=(int8 int4 bfloat16)
"$NCU" --version >"$OUT_DIR/ncu.log" 2>&1
rc=0
for f in "${formats[@]}"; do
  regex="$(kernel_regex "$f")" || {
    echo "unknown format $f" | tee -a "$OUT_DIR/ncu.log"
    rc=1
    continue
  }
  echo "== $f: $regex" >>"$OUT_DIR/ncu.log"
  timeout 240 "$NCU" --clock-control none --kernel-name-base demangled -k "regex:$regex" \
    -s 2 -c 1 --set full -f -o "$OUT_DIR/$f" "$BENCH" --quick >>"$OUT_DIR/ncu.log" 2>&1
  status=$?
  echo "== $f: ncu exit $status" >>"$OUT_DIR/ncu.log"
  if [[ -f "$OUT_DIR/$f.ncu-rep" ]]; then
    "$NCU" -i "$OUT_DIR/$f.ncu-rep" --page details --print-units base >"$OUT_DIR/$f.txt" 2>&1
  else
    rc=1
  fi
done
tail -n 40 "$OUT_DIR/ncu.log"
for f in "${formats[@]}"; do
  [[ -f "$OUT_DIR/$f.txt" ]] || continue
  echo "==== $f"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Stall|L2 Hit" \
    "$OUT_DIR/$f.txt" | head -n 30
done
exit $rc
