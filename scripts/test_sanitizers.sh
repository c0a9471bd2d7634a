#!/usr/bin/env bash
# The sanitizer part of the test suite (scripts/test.sh runs it after the
# Release build's tests; KVSERVE_SANITIZERS=0 skips it). CPU backend only.
#
#  build-asan/  clang, AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer),
#               with libFuzzer instrumentation: the unit and integration tests
#               and the fuzz corpora (ctest labels unit|integration|fuzz), then
#               every fuzzer for KVSERVE_FUZZ_SECONDS (default 20) from its seeds.
#  build-tsan/  gcc, ThreadSanitizer: every test of scheduler_tests (engine
#               loop, engine core, scheduler, output streams) and kernels_tests
#               (the kernels on their thread pool).
#
# Any report fails the run: sanitizers write their reports under
# <build>/sanitizer-reports/ (log_path), and a report there fails the run even
# when the process that wrote it exited 0 (a daemon a test started, say).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs="${KVSERVE_JOBS:-$(nproc)}"
fuzz_seconds="${KVSERVE_FUZZ_SECONDS:-20}"

# Fails when a sanitizer left a report under $1; prints the reports.
check_reports() {
  local dir=$1
  if compgen -G "$dir/*" >/dev/null; then
    echo "sanitizers: reports in $dir:" >&2
    for f in "$dir"/*; do echo "==== $f" >&2; cat "$f" >&2; done
    return 1
  fi
}

# ---- ASan + UBSan (+ LSan), with the fuzzers ----
asan="$root/build-asan"
# -O1 -g1: quick to compile, fast enough to run, line numbers in every report.
# KVSERVE_FULL_TEST_TREE=OFF: no benchmarks, oracle drivers or real-model
# tests (none of them runs here).
CC=clang CXX=clang++ KVSERVE_CUDA=OFF KVSERVE_BUILD_DIR="$asan" "$root/scripts/build.sh" \
  -DKVSERVE_SANITIZE=address -DKVSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKVSERVE_FULL_TEST_TREE=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
reports="$asan/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
# Left out: the teacher-forced accuracy tests (KvAccuracyTest: 14 model
# passes; WeightFormatsTest.Int8TeacherForced...: 2 passes of 2,048 tokens)
# are numerics the Release suite has checked (the KV and GEMM kernels they
# use run here in their own tests); and PagedAttentionTest.
# LongContextsAcrossPartitions, a 1,090-step decode on every ISA (143 s here,
# a sixth of this run), whose reads across partitions and blocks
# KvQuantAttentionTest.LongContextMatchesReference and
# .PartitionsSplitAcrossThreadsChangeNoBit make here too.
(cd "$asan" && ctest --output-on-failure -j "$jobs" --timeout 1500 -L 'unit|integration|fuzz' \
  -E 'KvAccuracyTest|TeacherForced|PagedAttentionTest.LongContextsAcrossPartitions')
check_reports "$reports"

# Coverage-guided fuzzing from the seeds, for a bounded time per target. The
# corpus grows in a scratch copy (the repository's seeds are not rewritten);
# a crash is saved to $asan/fuzz-artifacts/ and fails the run.
artifacts="$asan/fuzz-artifacts"
rm -rf "$artifacts" && mkdir -p "$artifacts"
for fuzzer in "$asan"/tests/fuzz/fuzz_*; do
  [[ "$fuzzer" == *_replay ]] && continue
  name=$(basename "$fuzzer"); name=${name#fuzz_}
  work="$asan/fuzz-corpus/$name"
  rm -rf "$work" && mkdir -p "$work"
  echo "fuzz: $name for ${fuzz_seconds}s"
  ASAN_OPTIONS="${ASAN_OPTIONS/log_path=$reports\/asan:/}" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$fuzzer" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name-" "$work" "$root/tests/fuzz/corpus/$name" 2>"$work.log" || {
      tail -60 "$work.log" >&2
      echo "fuzz: $name failed; the input is in $artifacts (copy it to tests/fuzz/corpus/$name/crash-<sha1> as a regression test)" >&2
      exit 1
    }
  grep -E "^stat::(number_of_executed_units|new_units_added)" "$work.log" | tr '\n' ' '; echo
done

# ---- TSan ----
tsan="$root/build-tsan"
cmake -S "$root" -B "$tsan" -G Ninja -DKVSERVE_CUDA=OFF -DKVSERVE_SANITIZE=thread \
  -DKVSERVE_FULL_TEST_TREE=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build "$tsan" -j "$jobs" --target scheduler_tests kernels_tests
reports="$tsan/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=1:second_deadlock_stack=1"
# Every test of the two binaries (gtest runs them in one process each), but
# the engine invariance tests only with the fp32 KV cache: the quantized
# formats run the same threads through the same pool, 6x slower under TSan.
quantized='*_bfloat16:*_float16:*_fp8_e4m3:*_int8:*_int4:*_fp4_e2m1'
# Left out too: PagedAttentionTest.LongContextsAcrossPartitions, a
# 1,090-step decode checked on every ISA (about 2.5 of TSan's minutes). Its
# threads do what KvQuantAttentionTest.PartitionsSplitAcrossThreadsChangeNoBit
# (which runs here) does: passes cut at their partitions over 2 and 4 threads.
same_threads_as_a_shorter_test='PagedAttentionTest.LongContextsAcrossPartitions'
# The two binaries side by side: each spends much of its time on fewer
# threads than the machine has.
pids=()
for t in scheduler_tests kernels_tests; do
  "$tsan/tests/$t" --gtest_brief=1 --gtest_filter="-$quantized:$same_threads_as_a_shorter_test" \
    >"$tsan/$t.log" 2>&1 &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
for t in scheduler_tests kernels_tests; do echo "==== $t"; cat "$tsan/$t.log"; done
[ "$failed" = 0 ] || { echo "sanitizers: a ThreadSanitizer test binary failed" >&2; exit 1; }
check_reports "$reports"
echo "sanitizers: no reports"
