#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in two halves:
#
#   bench/cuda/run_on_gpu.sh bundle
#       On a build machine (every dependency installed; no GPU needed): builds
#       (Release, sm_90) the GPU tests (tests/gpu -> gpu_*), the GPU benches
#       (bench/cuda -> kvserve_cuda_*), kvserve, kvserve-generate,
#       integration_tests, kvserve_logits_driver and the dlopen'ed modules
#       (SentencePiece, the daemon's CUDA backend), and copies them into
#       .gpu_bundle/bin/ and every shared library they need that the GPU
#       machine lacks (all but glibc, libstdc++/libgcc and the CUDA toolkit's)
#       into .gpu_bundle/lib/, stripped. Then packs it as
#       .gpu_carry/bundle.tar.xz, the file to carry: the device tool carries at
#       most 64 MiB with the working tree, and the bundle is 100-150 MiB, most
#       of it the same kernels' fatbins in every program; xz with a dictionary
#       larger than the bundle stores each copy once (about 15-20 MiB).
#       Env: KVSERVE_BUNDLE_BUILD_DIR (default /tmp/kvserve-gpu-build),
#            KVSERVE_CUDA_ARCH (default 90), JOBS (default nproc),
#            KVSERVE_BUNDLE_CUDA_FLAGS (default --compress-mode=size: the
#            fatbins are most of the size; uncompressed the bundle is ~150 MiB).
#
#   bench/cuda/run_on_gpu.sh run [--no-gpu-ok] [--full] [--only=PHASES]
#       On the GPU machine, from the repository root, with .gpu_carry carried
#       (it has no gRPC/absl/gtest/... packages: the bundle brings them); the
#       bundle is unpacked into .gpu_bundle first.
#       Phases, in order: tests (every gpu_* binary), pytest (every
#       tests/gpu/test_*.py, with the machine's python3 and PyTorch, against
#       the bundle's kvserve_logits_driver), sanitizer (compute-sanitizer
#       memcheck + racecheck on the kernel tests), bench (every kvserve_cuda_*
#       bench; with --quick unless --full), integration (integration_tests:
#       the daemon, whose --backend=auto picks CUDA there; then
#       daemon_kv_formats_check.py: the daemon per --kv_cache_dtype on CUDA). --only=tests,bench
#       runs a subset (e.g. a second call for what a time budget cut).
#       Nothing stops the run: every step runs, every result is reported.
#       Each step runs under `timeout`, inside a phase budget, so that the
#       whole run stays under ~9 minutes (KVSERVE_RUN_BUDGET_S, default 530;
#       a step the budget leaves no time for is reported NOTRUN). Logs go to $OUT (default /tmp/kvserve-gpu-out): env.log,
#       tests.log, pytest.log, sanitizer.log, bench.log, integration.log,
#       summary.txt. KVSERVE_PYTHON picks the python (default python3).
#       Without a GPU it exits 3, unless --no-gpu-ok (to check the plumbing:
#       the GPU test binaries then exit 77, reported as skipped).
#       Exit status: 0 when every step passed, 1 otherwise.
#
# Device tool example:
#   run(command="bench/cuda/run_on_gpu.sh run", carry=[".gpu_carry"], timeout_s=600)
#   then read $OUT's summary.txt (and the other logs) from files_at.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$REPO/.gpu_bundle"
PACKED="$REPO/.gpu_carry/bundle.tar.xz"
MAX_PACKED_MIB=50

die() {
  echo "run_on_gpu.sh: $*" >&2
  exit 2
}

# ---------------------------------------------------------------- bundle --

# A library the GPU machine has itself: glibc's, the compiler runtime's, the
# CUDA driver's and toolkit's (the bundle must use the machine's own CUDA).
is_system_lib() {
  local name="$1" path="$2"
  case "$name" in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | \
      libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | \
      libBrokenLocale.so.*) return 0 ;;
    libstdc++.so.* | libgcc_s.so.* | libatomic.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libnvrtc*.so.* | \
      libnvJitLink.so.* | libcupti.so.* | libnvidia-*.so.* | libcudnn*.so.* | libcurand.so.* | \
      libcufft*.so.* | libcusparse*.so.* | libcusolver*.so.* | libnccl.so.*) return 0 ;;
  esac
  case "$path" in
    /usr/local/cuda* | /usr/local/nvidia/*) return 0 ;;
  esac
  return 1
}

# Prints "soname path" for each dependency ldd resolves; fails on a missing one.
resolved_deps() {
  local out
  out="$(ldd "$1" 2>&1)" || die "ldd failed on $1: $out"
  if grep -q "not found" <<<"$out"; then
    die "$1 has unresolved libraries here:
$(grep 'not found' <<<"$out")"
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$out"
}

do_bundle() {
  local build="${KVSERVE_BUNDLE_BUILD_DIR:-/tmp/kvserve-gpu-build}"
  local arch="${KVSERVE_CUDA_ARCH:-90}"
  # Compressed fatbins: the kernels' SASS is most of each program's size
  # (about 17 MiB uncompressed, every program carrying its own copy); the
  # driver inflates it when the module loads.
  local cuda_flags="${KVSERVE_BUNDLE_CUDA_FLAGS---compress-mode=size}"
  local jobs="${JOBS:-$(nproc)}"
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
    die "no nvcc here: the bundle needs a CUDA build"

  # The targets: named by the source files, so new tests and benchmarks join by
  # themselves. Modules (dlopen'ed; bundled in lib/): the SentencePiece
  # tokenizer and, where the build has it, the daemon's CUDA backend.
  local -a programs=() modules=(kvserve_sentencepiece kvserve_cuda_backend)
  local f
  for f in "$REPO"/tests/gpu/*_test.cc; do programs+=("gpu_$(basename "$f" .cc)"); done
  for f in "$REPO"/bench/cuda/*_bench.cc; do programs+=("kvserve_cuda_$(basename "$f" .cc)"); done
  programs+=(kvserve kvserve-generate integration_tests kvserve_logits_driver)

  echo "== configuring $build (Release, sm_$arch, CUDA flags: $cuda_flags)"
  cmake -S "$REPO" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_FLAGS="$cuda_flags" >"$build.configure.log" 2>&1 ||
    die "cmake configure failed; see $build.configure.log"
  grep -q "CUDA found" "$build.configure.log" ||
    die "the configure did not enable CUDA; see $build.configure.log"

  # Only targets this configuration defines (an unknown one stops ninja).
  local known
  known="$(ninja -C "$build" -t targets all 2>/dev/null | sed -n 's/^\([^ :]*\): .*/\1/p' | sort -u)"
  local -a targets=() missing=()
  local t
  for t in "${programs[@]}" "${modules[@]}"; do
    if grep -qxF "$t" <<<"$known"; then
      targets+=("$t")
    elif [[ "$t" != kvserve_cuda_backend ]]; then  # optional: older trees link CUDA in
      missing+=("$t (no such target)")
    fi
  done

  echo "== building ${#targets[@]} targets with $jobs jobs (log: $build.build.log)"
  # -k 0: build everything that can be built; what failed is reported below.
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0 >"$build.build.log" 2>&1
  local build_rc=$?

  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  local -a bins=() mods=()
  local path
  for t in "${targets[@]}"; do
    if [[ " ${modules[*]} " == *" $t "* ]]; then
      path="$build/lib/lib$t.so"
      if [[ -f "$path" ]]; then
        cp "$path" "$BUNDLE/lib/"
        mods+=("$BUNDLE/lib/lib$t.so")
      else
        missing+=("$t")
      fi
      continue
    fi
    path="$(find "$build" -path '*/CMakeFiles' -prune -o -type f -name "$t" -perm -u+x -print |
      head -n 1)"
    if [[ -z "$path" ]]; then
      missing+=("$t")
      continue
    fi
    cp "$path" "$BUNDLE/bin/$t"
    bins+=("$BUNDLE/bin/$t")
  done

  # Shared libraries, transitively (ldd lists the whole closure).
  local name dep
  local -A copied=()
  for f in "${bins[@]}" "${mods[@]}"; do
    while read -r name dep; do
      [[ -n "${copied[$name]:-}" ]] && continue
      is_system_lib "$name" "$dep" && continue
      cp -L "$dep" "$BUNDLE/lib/$name"
      copied[$name]="$dep"
    done < <(resolved_deps "$f")
  done
  chmod -R u+w "$BUNDLE"
  strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/*.so* 2>/dev/null

  # What the run half needs to know: the daemon path integration_tests has
  # compiled in (it is recreated there as a link to bin/kvserve).
  {
    echo "build_dir=$build"
    echo "daemon_path=$build/server/kvserve"
    echo "cuda_arch=$arch"
    echo "cuda_flags=$cuda_flags"
    echo "built_on=$(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nvcc=$("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version | tail -n 1)"
    echo "glibc=$(ldd --version | head -n 1)"
  } >"$BUNDLE/manifest.txt"

  echo "== bundle: $BUNDLE"
  find "$BUNDLE" -type f -printf '%s %P\n' | sort -rn |
    awk '{ printf "  %-56s %7.2f MiB\n", $2, $1 / 1048576 }'
  local bytes mib
  bytes="$(du -sb "$BUNDLE" | cut -f1)"
  mib="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
  echo "== bundle size: $mib MiB (${#bins[@]} programs, ${#mods[@]} modules, ${#copied[@]} libraries)"
  echo "== packing $PACKED (xz, 192 MiB dictionary)"
  mkdir -p "$(dirname "$PACKED")"
  tar -C "$REPO" -cf - .gpu_bundle | xz -T1 --lzma2=preset=9,dict=192MiB >"$PACKED" ||
    die "packing the bundle failed"
  local packed_mib
  packed_mib="$(awk -v b="$(stat -c %s "$PACKED")" 'BEGIN { printf "%.1f", b / 1048576 }')"
  echo "== packed: $packed_mib MiB: carry .gpu_carry"
  local rc=0
  if awk -v m="$packed_mib" -v max="$MAX_PACKED_MIB" 'BEGIN { exit !(m > max) }'; then
    echo "WARNING: the packed bundle is over $MAX_PACKED_MIB MiB: the device tool carries at" \
      "most 64 MiB with the working tree; drop programs the GPU run does not need" >&2
    rc=1
  fi
  if ((${#missing[@]} > 0)); then
    echo "WARNING: not built (build exit $build_rc; see $build.build.log): ${missing[*]}" >&2
    grep -m 20 -E "error|FAILED" "$build.build.log" >&2
    rc=1
  fi
  grep -qxF '/.gpu_bundle/' "$REPO/.gitignore" ||
    echo "WARNING: /.gpu_bundle/ is not in .gitignore" >&2
  grep -qxF '/.gpu_carry/' "$REPO/.gitignore" ||
    echo "WARNING: /.gpu_carry/ is not in .gitignore" >&2
  return $rc
}

# ------------------------------------------------------------------- run --

OUT_DIR=""
RESULTS=()      # "STATUS|phase|step|seconds|detail"
FAILED=0
RUN_START=$SECONDS

# Seconds left before the given phase deadline (seconds since RUN_START).
left_until() { echo $(($1 - (SECONDS - RUN_START))); }

record() {
  RESULTS+=("$1|$2|$3|$4|$5")
  case "$1" in PASS | SKIP) ;; *) FAILED=1 ;; esac
}

# run_step PHASE NAME LOGFILE CAP DEADLINE [--allow-skip] -- CMD...
# Runs CMD under `timeout`, appending its output to LOGFILE, and records the
# outcome: exit 0 pass, 77 skip (a failure when a GPU exists), 124/137 timeout.
run_step() {
  local phase="$1" name="$2" log="$3" cap="$4" deadline="$5"
  shift 5
  local skip_ok=0
  if [[ "${1:-}" == "--allow-skip" ]]; then
    skip_ok=1
    shift
  fi
  [[ "${1:-}" == "--" ]] && shift
  local left limit
  left="$(left_until "$deadline")"
  limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    echo "### $phase $name: NOT RUN (phase time budget spent)" | tee -a "$log"
    record "NOTRUN" "$phase" "$name" 0 "time budget spent"
    return
  fi
  {
    echo
    echo "### $phase $name (timeout ${limit}s): $*"
  } >>"$log"
  local t0=$SECONDS rc
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  echo "### $phase $name: exit $rc after ${dt}s" >>"$log"
  if ((rc == 0)); then
    record PASS "$phase" "$name" "$dt" ""
  elif ((rc == 77)); then
    if ((skip_ok)); then
      record SKIP "$phase" "$name" "$dt" "exit 77: no GPU"
    else
      record FAIL "$phase" "$name" "$dt" "exit 77 (skipped) although a GPU exists"
    fi
  elif ((rc == 124 || rc == 137)); then
    record TIMEOUT "$phase" "$name" "$dt" "killed after ${limit}s"
  elif ((rc == 127)); then
    record FAIL "$phase" "$name" "$dt" "exit 127: command not found ($1)"
  else
    record FAIL "$phase" "$name" "$dt" "exit $rc"
  fi
  printf '  %-8s %-12s %-44s %4ss\n' "${RESULTS[-1]%%|*}" "$phase" "$name" "$dt"
}

# A gtest filter with the first N tests of every suite of a binary (keeps
# the sanitizers short while touching every kernel family); "*" if listing
# fails.
first_of_each_suite() {
  local list
  list="$("$1" --gtest_list_tests 2>/dev/null)" || {
    echo "*"
    return
  }
  awk -v n="$2" '
    /^[^ ]/ { suite = $1; taken = 0; next }
    /^  / && taken < n && suite != "" { f = f (f == "" ? "" : ":") suite $1; ++taken }
    END { print (f == "" ? "*" : f) }' <<<"$list"
}

# Adds the directories of CUDA libraries the programs cannot find (a toolkit
# in another place, the pip wheels under python's site-packages).
resolve_missing_libs() {
  local f missing lib dir
  missing="$(for f in "$BUNDLE"/bin/* "$BUNDLE"/lib/libkvserve_*.so; do ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }'; done |
    sort -u)"
  [[ -z "$missing" ]] && return 0
  echo "libraries not found on the default path: $(tr '\n' ' ' <<<"$missing")"
  local -a roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
  local site
  site="$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)"
  for dir in $site; do roots+=("$dir/nvidia"); done
  for lib in $missing; do
    dir="$(find "${roots[@]}" -name "$lib" -print -quit 2>/dev/null)"
    if [[ -n "$dir" ]]; then
      echo "  $lib: found at $dir"
      LD_LIBRARY_PATH="$(dirname "$dir"):$LD_LIBRARY_PATH"
      export LD_LIBRARY_PATH
    else
      echo "  $lib: NOT FOUND anywhere searched"
    fi
  done
  echo "still missing:"
  for f in "$BUNDLE"/bin/* "$BUNDLE"/lib/libkvserve_*.so; do ldd "$f" 2>/dev/null | grep "not found" | sed "s|^|  $(basename "$f"): |"; done
}

do_run() {
  local no_gpu_ok=0 quick=1 only="tests,pytest,sanitizer,bench,integration"
  local a
  for a in "$@"; do
    case "$a" in
      --no-gpu-ok) no_gpu_ok=1 ;;
      --full) quick=0 ;;
      --only=*) only="${a#--only=}" ;;
      *) die "unknown option $a (run [--no-gpu-ok] [--quick] [--only=PHASE,...])" ;;
    esac
  done
  if [[ ! -d "$BUNDLE/bin" && -f "$PACKED" ]]; then
    # python3's tarfile, not xz(1): the GPU machine's image is not ours to assume.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$PACKED" "$REPO" || die "could not unpack $PACKED"
  fi
  [[ -d "$BUNDLE/bin" ]] ||
    die "no $BUNDLE/bin: run 'bench/cuda/run_on_gpu.sh bundle' on the build machine and carry .gpu_carry"
  OUT_DIR="${OUT:-/tmp/kvserve-gpu-out}"
  mkdir -p "$OUT_DIR"
  local envlog="$OUT_DIR/env.log" tests_log="$OUT_DIR/tests.log" san_log="$OUT_DIR/sanitizer.log"
  local bench_log="$OUT_DIR/bench.log" int_log="$OUT_DIR/integration.log"
  local py_log="$OUT_DIR/pytest.log"
  local summary="$OUT_DIR/summary.txt"
  : >"$tests_log"
  : >"$san_log"
  : >"$bench_log"
  : >"$int_log"
  : >"$py_log"

  # The GPU, before anything else (nvidia-smi with the machine's own libraries).
  local have_gpu=1
  {
    echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "== bundle manifest"
    cat "$BUNDLE/manifest.txt" 2>/dev/null
    echo "== nvidia-smi"
  } >"$envlog"
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >>"$envlog" 2>&1 ||
    ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    have_gpu=0
    echo "(no nvidia-smi, or it lists no GPU)" >>"$envlog"
  fi
  cat "$envlog"
  if ((!have_gpu)); then
    echo "run_on_gpu.sh: no NVIDIA GPU here (nvidia-smi is missing or lists no GPU)." >&2
    if ((!no_gpu_ok)); then
      echo "run_on_gpu.sh: nothing run; pass --no-gpu-ok to check the plumbing anyway." >&2
      exit 3
    fi
    echo "run_on_gpu.sh: --no-gpu-ok: running anyway (GPU tests will exit 77 = skipped)." >&2
  fi

  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The dlopen'ed modules: by these variables first (the paths compiled in
  # are the build machine's).
  export KVSERVE_SENTENCEPIECE_MODULE="$BUNDLE/lib/libkvserve_sentencepiece.so"
  if [[ -f "$BUNDLE/lib/libkvserve_cuda_backend.so" ]]; then
    export KVSERVE_CUDA_BACKEND_MODULE="$BUNDLE/lib/libkvserve_cuda_backend.so"
  fi
  {
    echo "== nvcc"
    "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version 2>&1 | tail -n 2
    echo "== compute-sanitizer"
    command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>&1
    echo "== libraries"
    resolve_missing_libs
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  } >"$OUT_DIR/.libs.tmp" 2>&1  # braces, not a pipeline: its exports stay here
  tee -a "$envlog" <"$OUT_DIR/.libs.tmp"
  rm -f "$OUT_DIR/.libs.tmp"

  # integration_tests starts the daemon by the path compiled into it.
  local daemon_path
  daemon_path="$(sed -n 's/^daemon_path=//p' "$BUNDLE/manifest.txt" 2>/dev/null)"
  if [[ -n "$daemon_path" && ! -e "$daemon_path" && -x "$BUNDLE/bin/kvserve" ]]; then
    mkdir -p "$(dirname "$daemon_path")" && ln -s "$BUNDLE/bin/kvserve" "$daemon_path"
  fi

  local sanitizer
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  local budget="${KVSERVE_RUN_BUDGET_S:-530}"
  # Cumulative phase deadlines (time a phase leaves unused passes on).
  local d_tests=$((budget * 20 / 100)) d_py=$((budget * 32 / 100)) d_san=$((budget * 60 / 100))
  local d_bench=$((budget * 88 / 100)) d_int=$budget
  local skip_flag=()
  ((no_gpu_ok && !have_gpu)) && skip_flag=(--allow-skip)
  local f name

  echo "== running (budget ${budget}s; logs in $OUT_DIR)"
  if [[ ",$only," == *",tests,"* ]]; then
    for f in "$BUNDLE"/bin/gpu_*; do
      [[ -x "$f" ]] || continue
      name="$(basename "$f")"
      run_step tests "$name" "$tests_log" 150 "$d_tests" "${skip_flag[@]}" -- "$f"
    done
  fi

  if [[ ",$only," == *",pytest,"* ]]; then
    # tests/gpu/test_*.py find the driver at $KVSERVE_BUILD_DIR/tests/: a
    # stand-in build dir whose tests/ links to the bundle's programs.
    local shim="${TMPDIR:-/tmp}/kvserve-gpu-shim"
    mkdir -p "$shim/tests"
    ln -sf "$BUNDLE/bin/kvserve_logits_driver" "$shim/tests/kvserve_logits_driver"
    for f in "$REPO"/tests/gpu/test_*.py; do
      [[ -f "$f" ]] || continue
      name="$(basename "$f")"
      run_step pytest "$name" "$py_log" 150 "$d_py" "${skip_flag[@]}" -- \
        env KVSERVE_BUILD_DIR="$shim" KVSERVE_SOURCE_DIR="$REPO" HF_HUB_OFFLINE=1 \
        TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 \
        "${KVSERVE_PYTHON:-python3}" -m pytest -q -p no:cacheprovider "$f"
    done
  fi

  if [[ ",$only," == *",sanitizer,"* ]]; then
    local kernel_tests=(gpu_kv_formats_test gpu_paged_attention_split_kv_test
      gpu_paged_attention_prefill_test gpu_elementwise_test gpu_sampling_test gpu_gemm_test)
    local filter
    for name in "${kernel_tests[@]}"; do
      f="$BUNDLE/bin/$name"
      if [[ ! -x "$f" ]]; then
        echo "### sanitizer $name: not in the bundle" >>"$san_log"
        record MISSING sanitizer "$name" 0 "not in the bundle"
        continue
      fi
      # Filters (KVSERVE_MEMCHECK_FILTER / KVSERVE_RACECHECK_FILTER override;
      # "*" is the whole binary): memcheck the first 3 tests of every suite,
      # racecheck (slower) the first one.
      filter="${KVSERVE_MEMCHECK_FILTER:-$(first_of_each_suite "$f" 3)}"
      # The KV formats: the tensor-core split-KV kernel (head dims 64 and 128).
      [[ "$name" == gpu_kv_formats_test && -z "${KVSERVE_MEMCHECK_FILTER:-}" ]] &&
        filter='*SplitKvMatchesCpu/int4_bf16_d64_bs7_g4:*SplitKvMatchesCpu/int8_f32_d128_bs16_g8'
      run_step sanitizer "memcheck $name" "$san_log" 75 "$d_san" "${skip_flag[@]}" -- \
        "$sanitizer" --tool memcheck --error-exitcode 99 "$f" --gtest_filter="$filter"
      filter="${KVSERVE_RACECHECK_FILTER:-$(first_of_each_suite "$f" 1)}"
      [[ "$name" == gpu_kv_formats_test && -z "${KVSERVE_RACECHECK_FILTER:-}" ]] &&
        filter='*SplitKvMatchesCpu/int8_bf16_d128_bs16_g4:*SplitKvMatchesCpu/fp4_e2m1_f32_d64_bs7_g8'
      run_step sanitizer "racecheck $name" "$san_log" 60 "$d_san" "${skip_flag[@]}" -- \
        "$sanitizer" --tool racecheck --error-exitcode 99 "$f" --gtest_filter="$filter"
    done
  fi

  if [[ ",$only," == *",bench,"* ]]; then
    local -a bench_args=()
    ((quick)) && bench_args=(--quick)
    for f in "$BUNDLE"/bin/kvserve_cuda_*; do
      [[ -x "$f" ]] || continue
      name="$(basename "$f")"
      run_step bench "$name" "$bench_log" 180 "$d_bench" -- "$f" "${bench_args[@]}"
    done
  fi

  if [[ ",$only," == *",integration,"* ]]; then
    if [[ -x "$BUNDLE/bin/integration_tests" ]]; then
      run_step integration integration_tests "$int_log" 120 "$d_int" -- \
        "$BUNDLE/bin/integration_tests"
    else
      record MISSING integration integration_tests 0 "not in the bundle"
    fi
    # The daemon on CUDA per --kv_cache_dtype, through its HTTP API.
    if [[ -x "$BUNDLE/bin/kvserve" ]]; then
      run_step integration "daemon kv formats" "$int_log" 150 "$d_int" "${skip_flag[@]}" -- \
        "${KVSERVE_PYTHON:-python3}" "$REPO/bench/cuda/daemon_kv_formats_check.py" \
        "$BUNDLE/bin/kvserve" builtin:small auto int8 int4 fp8_e4m3 fp4_e2m1
    fi
  fi

  # The summary: one line per step, then the benches' headline figures.
  {
    echo "GPU run summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - RUN_START))s," \
      "gpu: $(nvidia-smi -L 2>/dev/null | head -n 1 || echo none))"
    printf '%-8s %-12s %-44s %6s  %s\n' status phase step secs detail
    local r
    for r in "${RESULTS[@]}"; do
      IFS='|' read -r s p n t d <<<"$r"
      printf '%-8s %-12s %-44s %6s  %s\n' "$s" "$p" "$n" "$t" "$d"
    done
    echo
    echo "failed gtest cases:"
    grep -h '^\[  FAILED  \] [A-Za-z]' "$tests_log" "$san_log" "$int_log" | sort -u | head -n 40
    echo "failed pytest cases:"
    grep -h '^FAILED ' "$py_log" | head -n 20
    echo "sanitizer summaries:"
    awk '/^### sanitizer .* \(timeout/ { step = $3 " " $4 }
         /^=+ (ERROR|RACECHECK) SUMMARY/ { sub(/^=+ /, ""); printf "  %-48s %s\n", step, $0 }' \
      "$san_log"
    echo
    echo "bench headlines:"
    grep -h '^RESULT' "$bench_log"
    # The other benches print a table at the end: its last lines.
    local b
    for b in "$BUNDLE"/bin/kvserve_cuda_*; do
      [[ -x "$b" ]] || continue
      name="$(basename "$b")"
      [[ "$name" == kvserve_cuda_e2e_decode_bench ]] && continue
      grep -qF "### bench $name (" "$bench_log" || continue
      echo "-- $name (last lines)"
      awk -v n="$name" '
        $0 ~ "^### bench " n " \\(" { on = 1; k = 0; next }
        $0 ~ "^### bench " n ":" { on = 0 }
        on { buf[k++ % 8] = $0 }
        END { for (i = (k > 8 ? k - 8 : 0); i < k; i++) print "  " buf[i % 8] }' "$bench_log"
    done
    echo
    if ((FAILED)); then echo "OVERALL: FAILURES (see the logs)"; else echo "OVERALL: all passed"; fi
  } >"$summary"
  echo
  cat "$summary"
  return $FAILED
}

case "${1:-}" in
  bundle)
    shift
    do_bundle "$@"
    ;;
  run)
    shift
    do_run "$@"
    ;;
  *)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
