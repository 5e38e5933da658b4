#!/usr/bin/env bash
# Every device check of the CUDA backend on one GPU, in a few minutes, ending in one summary
# table: kernel agreement with the CPU executor, plans verified on the GPU against one CPU
# device, bf16 GEMM TFLOP/s (4096³, 8192³, and the
# plans' own shapes), copy bandwidth, calibration, per-role predicted against measured step
# times of gpt2-small, bert-base and resnet50 plans (shipped hgx-h200 profile and the calibrated
# one), and gpt2-small's training step against PyTorch eager's.
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR holds autopar, autopar_cuda_tests and cuda_bench (a build's programs, or the folder
# scripts/gpu-bundle.sh makes, with its lib/ beside bin/); default .gpu/bin, else build.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${1:-}
if [ -z "$bin" ]; then
  if [ -x .gpu/bin/autopar ]; then bin=.gpu/bin; else bin=build; fi
fi
out=${2:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
# Seconds after which the remaining checks are skipped (the summary is always printed).
budget=${GPU_CHECK_SECONDS:-420}
in_time() { if [ "$SECONDS" -lt "$budget" ]; then return 0; fi; row "$1" "SKIPPED (past ${budget} s)"; return 1; }
# Sections to leave out, comma-separated: bench (GEMMs and bandwidth), step (gpt2-small against
# PyTorch), e.g. GPU_CHECK_SKIP=bench,step when a run earlier on the same build measured them.
skip=",${GPU_CHECK_SKIP:-},"
wanted() { case "$skip" in *",$1,"*) row "$2" "SKIPPED (GPU_CHECK_SKIP)"; return 1 ;; esac; return 0; }
autopar=$bin/autopar
tests=$bin/autopar_cuda_tests
[ -x "$tests" ] || tests=$bin/tests/autopar_cuda_tests
bench=$bin/cuda_bench
[ -x "$bench" ] || bench=$bin/bench/cuda_bench

# Libraries: the bundle's own, then cuBLAS/cuDNN/NCCL from the CUDA toolkit or Python's wheels.
libs=""
[ -d "$bin/../lib" ] && libs=$(cd "$bin/../lib" && pwd)
py=$(command -v python3 || true)
if [ -n "$py" ]; then
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
  if [ -n "$site" ] && [ -d "$site/nvidia" ]; then
    for d in $(find "$site/nvidia" -name 'libcublasLt.so*' -o -name 'libcudnn.so*' -o -name 'libnccl.so*' \
               -o -name 'libcudnn_*.so*' -o -name 'libcublas.so*' 2>/dev/null | xargs -r -n1 dirname | sort -u); do
      libs="$libs:$d"
    done
  fi
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

summary=$out/summary.txt
: >"$summary"
# The summary, and everything else in one file (a lease brings back a few files only): at the
# end, or when the script is stopped (SIGTERM, SIGINT) before it.
finish() {
  trap - TERM INT
  echo
  echo "================ summary ($SECONDS s) ================"
  cat "$summary"
  tar -C "$out" -czf "$out/logs.tar.gz" --exclude=logs.tar.gz --exclude=summary.txt . 2>/dev/null
  find "$out" -mindepth 1 -maxdepth 1 ! -name logs.tar.gz ! -name summary.txt \
    ! -name h200-calibrated.yaml -exec rm -rf {} +
}
trap 'echo "gpu-check: stopped at $SECONDS s"; finish; exit 1' TERM INT
row() { printf '%-58s %s\n' "$1" "$2" | tee -a "$summary"; }
failed=0
fail() { failed=1; row "$1" "FAIL ${2:-}"; }

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
missing=$(ldd "$autopar" | grep 'not found' || true)
if [ -n "$missing" ]; then echo "$missing"; echo "gpu-check: libraries missing"; exit 2; fi

echo "== kernels and training steps against the CPU (ctest label cuda)"
# One process per test, so a crash loses one test, not the rest (its last words are kept).
: >"$out/cuda_tests.txt"
passed=0; failures=0; skipped=0; crashed=""
for t in $("$tests" --gtest_list_tests | awk '/^[^ ]/{suite=$1} /^  /{print suite $1}'); do
  timeout 90 "$tests" --gtest_color=no --gtest_filter="$t" >>"$out/cuda_tests.txt" 2>&1
  rc=$?
  if grep -q "^\[  SKIPPED \] $t " "$out/cuda_tests.txt"; then skipped=$((skipped + 1))
  elif [ "$rc" = 0 ]; then passed=$((passed + 1))
  elif [ "$rc" -ge 124 ]; then
    crashed="$crashed $t(rc $rc)"; failures=$((failures + 1))
    # A crash is looked at once more: the host's stack under cuda-gdb (a fault inside a
    # library or a kernel family's host code), then compute-sanitizer (bad device accesses,
    # API errors) where the machine's runtime lets it read the device.
    if command -v cuda-gdb >/dev/null && [ "$SECONDS" -lt $((budget / 2)) ]; then
      timeout 90 cuda-gdb -q -batch -ex run -ex bt -ex 'info registers rip' \
        --args "$tests" --gtest_filter="$t" >"$out/backtrace-$t.txt" 2>&1
      grep -E '^#[0-9]+|signal|rip' "$out/backtrace-$t.txt" | head -24
    fi
    if command -v compute-sanitizer >/dev/null && [ "$SECONDS" -lt $((budget / 2)) ]; then
      timeout 120 compute-sanitizer --tool memcheck --print-limit 20 "$tests" --gtest_filter="$t" \
        >"$out/sanitizer-$t.txt" 2>&1
      grep -E 'ERROR SUMMARY|Invalid|Program hit|crashed|at 0x' "$out/sanitizer-$t.txt" | head -12
    fi
  else failures=$((failures + 1)); fi
done
grep -E 'Failure|Expected|Which is|error|crashed|output [0-9]|  Actual' "$out/cuda_tests.txt" | head -60
if [ "$failures" = 0 ] && [ "$skipped" = 0 ] && [ "$passed" -gt 0 ]; then row "kernel agreement (cuda tests)" "$passed passed"
else fail "kernel agreement (cuda tests)" "$passed passed, $failures failed, $skipped skipped${crashed:+; crashed:$crashed}"; fi

echo "== plans verified on the GPU against one CPU device (verify --backend cuda)"
# Every device a thread on this GPU, communicating through the host; with two GPUs or more and
# mpirun, one rank per GPU over NCCL as well.
vplans=$out/verify
mkdir -p "$vplans"
printf 'mesh: {dp: 2, tp: 2}\nbatch: {global: 4, micro: 2}\ntensor: megatron-sp\n' >"$vplans/gpt.yaml"
printf 'mesh: {pp: 2, dp: 2}\nbatch: {global: 8, micro: 2}\npipeline: {schedule: 1f1b}\n' >"$vplans/mlp.yaml"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for spec in "gpt-tiny gpt 4" "mlp mlp 8"; do
  set -- $spec
  in_time "verify --backend cuda $1" || continue
  dir=$vplans/$1
  timeout 60 "$autopar" transform "$1" --scheme "$vplans/$2.yaml" --batch "$3" -o "$dir" >"$dir.transform.txt" 2>&1 \
    || { fail "verify --backend cuda $1" "transform: $(tail -1 "$dir.transform.txt")"; continue; }
  modes="inproc"
  [ "$gpus" -ge 4 ] && command -v mpirun >/dev/null && modes="inproc mpi"
  for comm in $modes; do
    if [ "$comm" = mpi ]; then
      timeout 120 mpirun --allow-run-as-root -np 4 "$autopar" verify "$dir" --backend cuda --comm mpi --json >"$dir.$comm.json" 2>"$dir.$comm.err"
    else
      timeout 120 "$autopar" verify "$dir" --backend cuda --json >"$dir.$comm.json" 2>"$dir.$comm.err"
    fi
    vrc=$?
    worst=$(python3 -c "import json,sys; t=open(sys.argv[1]).read(); print(json.loads(t[t.index('{'):])['worst_relative_error'])" "$dir.$comm.json" 2>/dev/null)
    if [ "$vrc" = 0 ] && [ -n "$worst" ]; then row "verify --backend cuda $1 ($comm)" "ok, worst relative error $worst"
    else fail "verify --backend cuda $1 ($comm)" "rc $vrc $(tail -c 200 "$dir.$comm.err")"; fi
  done
done

echo "== GEMM and bandwidth"
if wanted bench "GEMM and bandwidth benchmarks"; then
timeout 150 "$bench" --benchmark_format=json --benchmark_min_time=0.05 >"$out/cuda_bench.json" 2>"$out/cuda_bench.err"
# Read what came out, also from a run cut short (each benchmark's object is complete).
cat >"$out/bench_results.py" <<'PY'
import json, re, sys
def benchmarks(path):
    text = open(path).read()
    try:
        return json.loads(text).get("benchmarks", [])
    except Exception:
        found = []
        for block in re.findall(r"\{[^{}]*\"name\"[^{}]*\}", text):
            try:
                found.append(json.loads(block))
            except Exception:
                pass
        return found
PY
python3 - "$out/cuda_bench.json" <<'PY' | tee -a "$summary"
import sys
sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])
from bench_results import benchmarks
for b in benchmarks(sys.argv[1]):
    name = b["name"].split("/manual_time")[0]
    if b.get("error_occurred"):
        print(f"{name:<58} ERROR {b.get('error_message','')}")
    elif "FLOP/s" in b:
        print(f"{name:<58} {b['FLOP/s']/1e12:8.1f} TFLOP/s  ({b['real_time']:.3f} {b['time_unit']})")
    elif "bytes/s" in b:
        print(f"{name:<58} {b['bytes/s']/1e12:8.2f} TB/s  ({b['real_time']:.1f} {b['time_unit']})")
PY
gemm8k=$(cd "$out" && python3 -c "from bench_results import benchmarks; print(max([b.get('FLOP/s', 0) for b in benchmarks('cuda_bench.json') if b['name'].startswith('BM_GemmBf16/8192')] + [0]) / 1e12)" 2>/dev/null || echo 0)
python3 -c "import sys; sys.exit(0 if ${gemm8k:-0} >= 700 else 1)" && row "bf16 GEMM 8192^3 >= 700 TFLOP/s" "ok ($gemm8k)" || fail "bf16 GEMM 8192^3 >= 700 TFLOP/s" "($gemm8k)"

fi

echo "== gpt2-small training step: autopar (CUDA graph) against PyTorch eager, fp32"
wanted step "gpt2-small step" && in_time "gpt2-small step" && {
timeout 120 "$autopar" run gpt2-small --train --backend cuda --batches 1 --steps 20 --json >"$out/autopar_gpt2.json" 2>"$out/autopar_gpt2.err"
echo "autopar rc $?: $(tail -c 300 "$out/autopar_gpt2.err")"
timeout 90 python3 scripts/torch_gpt2_step.py --json --steps 20 --warmup 5 >"$out/torch_gpt2.json" 2>"$out/torch_gpt2.err"
echo "torch rc $?: $(tail -c 300 "$out/torch_gpt2.err")"
python3 - "$out" <<'PY' | tee -a "$summary"
import json, sys, os
out = sys.argv[1]
def load(name):
    try:
        text = open(os.path.join(out, name)).read()
        return json.loads(text[text.index("{"):])
    except Exception as e:
        return {"error": str(e)}
a, t = load("autopar_gpt2.json"), load("torch_gpt2.json")
if "median_step_s" in a and "median_step_s" in t:
    ratio = a["median_step_s"] / t["median_step_s"]
    verdict = "ok" if ratio <= 1.5 else "FAIL"
    print(f"{'gpt2-small step, autopar / PyTorch eager (<= 1.5)':<58} {verdict} {a['median_step_s']*1e3:.1f} ms / {t['median_step_s']*1e3:.1f} ms = {ratio:.2f}x")
    print(f"{'gpt2-small losses (autopar, first and last)':<58} {a['losses'][0]:.4f} -> {a['losses'][-1]:.4f}")
else:
    print(f"{'gpt2-small step, autopar / PyTorch eager (<= 1.5)':<58} FAIL autopar: {a.get('error', '')} torch: {t.get('error', '')}")
PY
}

echo "== calibrate --backend cuda"
in_time "calibrate" && \
timeout 120 "$autopar" calibrate --backend cuda --quick -o "$out/h200-calibrated.yaml" --hw configs/hw/hgx-h200.yaml >"$out/calibrate.txt" 2>&1
echo "calibrate rc $?"; cat "$out/calibrate.txt" | tail -20
[ -s "$out/h200-calibrated.yaml" ] && row "calibrate --backend cuda" "wrote h200-calibrated.yaml" || fail "calibrate --backend cuda"

echo "== plans: per-role predicted against measured"
plans=$out/plans
mkdir -p "$plans"
cat >"$plans/dp8-bf16.yaml" <<'YAML'
mesh: {dp: 8}
batch: {global: 64, micro: 8}
precision: bf16
YAML
cat >"$plans/tp2dp4-bf16.yaml" <<'YAML'
mesh: {dp: 4, tp: 2}
batch: {global: 32, micro: 8}
tensor: megatron
precision: bf16
YAML
for spec in "bert-base dp8-bf16" "gpt2-small tp2dp4-bf16" "resnet50 dp8-bf16"; do
  set -- $spec
  model=$1; scheme=$2
  dir=$plans/$model-$scheme
  in_time "plan $model $scheme" || continue
  timeout 60 "$autopar" transform "$model" --scheme "$plans/$scheme.yaml" -o "$dir" >"$dir.transform.txt" 2>&1 || { fail "plan $model $scheme" "$(tail -1 "$dir.transform.txt")"; continue; }
  # The calibrated profile first: it is the one the predictions must meet.
  for hw in "$out/h200-calibrated.yaml" configs/hw/hgx-h200.yaml; do
    [ -s "$hw" ] || continue
    in_time "plan $model $scheme $(basename "$hw")" || continue
    tag=$(basename "$hw" .yaml)
    timeout 100 "$autopar" profile "$dir" --backend cuda --hw "$hw" --steps 5 --json >"$dir.$tag.json" 2>"$dir.$tag.err"
    prc=$?
    [ "$prc" = 0 ] || echo "profile $model $scheme ($tag) rc $prc (124: timed out): $(tail -c 300 "$dir.$tag.err")"
    python3 - "$dir.$tag.json" "$model $scheme ($tag)" <<'PY' | tee -a "$summary"
import json, sys
try:
    text = open(sys.argv[1]).read()
    p = json.loads(text[text.index("{"):])
except Exception as e:
    print(f"{sys.argv[2]:<58} FAIL no result ({e})")
    sys.exit()
for r in p["roles"]:
    err = r["error"] * 100
    print(f"{sys.argv[2] + ' role ' + str(r['role']):<58} predicted {r['predicted_compute_s']*1e3:8.2f} ms  measured {r['measured_compute_s']*1e3:8.2f} ms  {err:+6.1f}%")
    for name, c in sorted(r.get("classes", {}).items()):
        if c["predicted_s"] or c["measured_s"]:
            print(f"{'   ' + name:<58} predicted {c['predicted_s']*1e3:8.2f} ms  measured {c['measured_s']*1e3:8.2f} ms")
    if "calibrated)" in sys.argv[2]:
        kinds = sorted(r.get("launch_kinds", {}).items(), key=lambda kv: -kv[1]["measured_s"])
        print("   launches: " + ", ".join(f"{k} {v['launches']:.0f}x {v['measured_s']*1e3:.2f} ms" for k, v in kinds[:8]))
        for l in r.get("slowest_launches", [])[:6]:
            rate = f" {l['bytes_per_s']/1e9:.0f} GB/s" if "bytes_per_s" in l else ""
            print(f"   {l['kind']:<10} {l['node'][:40]:<40} {l['op_type'][:14]:<14} {l['nodes']:>3} nodes {l['measured_s']*1e3:7.3f} ms{rate}")
PY
  done
done

finish
exit $failed
