#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets of fuzz/ with clang, ASan
# and UBSan (in $FUZZ_BUILD, build-asan by default: the build `make test-asan` uses) and runs
# each for SECONDS (default 60) on its corpus, seeded from the repository's files. New inputs
# accumulate in $FUZZ_BUILD/fuzz-corpus/<target>/; an input that crashes a target is saved
# in $FUZZ_BUILD/fuzz-artifacts/ (copy it to fuzz/regressions/<target>/ with its fix, so
# every build replays it). $FUZZ_FLAGS adds libFuzzer flags (-fork=1 -ignore_crashes=1 for long
# runs). Prints the executions per target; exits 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
build=${FUZZ_BUILD:-build-asan}
jobs=${JOBS:-$(nproc)}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found (Debian: apt install clang libclang-rt-dev)" >&2
  exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DAUTOPAR_SANITIZE=address -DAUTOPAR_FUZZ=ON -DAUTOPAR_CUDA=OFF >/dev/null
fi
cmake --build "$build" -j "$jobs" --target fuzzers

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzzer.cc; do
    t=$(basename "$f" _fuzzer.cc)
    targets+=("$t")
  done
fi

seeds="$build/fuzz-seeds"
"$build/fuzz/fuzz_seeds" "$seeds" >/dev/null
corpora="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
logs="$build/fuzz-logs"
mkdir -p "$corpora" "$artifacts" "$logs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
printf '%-20s %12s %10s %8s  %s\n' target executions "exec/s" corpus verdict
for t in "${targets[@]}"; do
  exe="$build/fuzz/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "fuzz.sh: no target $t (the targets: fuzz/*_fuzzer.cc)" >&2
    exit 2
  fi
  mkdir -p "$corpora/$t"
  inputs=("$corpora/$t" "$seeds/$t")
  [ -d "fuzz/regressions/$t" ] && inputs+=("fuzz/regressions/$t")
  verdict=ok
  # A plan directory's manifest may name a large zoo model, which lowers shape-only in
  # seconds: the timeout is for hangs, not for slow inputs.
  if ! "$exe" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$t-" ${FUZZ_FLAGS:-} "${inputs[@]}" >"$logs/$t.log" 2>&1; then
    verdict="CRASH (see $logs/$t.log)"
    failed=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$t.log" | tail -1)
  size=$(find "$corpora/$t" -type f | wc -l)
  printf '%-20s %12s %10s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "$size" "$verdict"
done
exit $failed
