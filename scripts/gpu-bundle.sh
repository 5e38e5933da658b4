#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into one folder for a GPU machine that has the CUDA
# libraries (cuBLASLt, cuDNN, NCCL) but not autopar's other dependencies: the stripped
# programs and every shared library they load that is not the C library's or CUDA's.
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, .gpu)
set -euo pipefail
build=${1:-build}
out=${2:-.gpu}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
programs=("$build/autopar" "$build/tests/autopar_cuda_tests" "$build/bench/cuda_bench")
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "gpu-bundle: $p is missing: build first (make build)" >&2; exit 2; }
  # Symbols stay (a crash's backtrace names the functions); debug sections go.
  strip --strip-debug -o "$out/bin/$(basename "$p")" "$p"
done
# The libraries ldd resolves, less the C and C++ runtimes (the GPU machine's are as new or
# newer, and cuDNN's own libraries load against them) and the CUDA ones it brings.
for p in "${programs[@]}"; do ldd "$p"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*) continue ;;
    libstdc++.so*|libz.so*) continue ;;
    libcublas*|libcudnn*|libnccl*|libcudart*|libcuda.so*) continue ;;
  esac
  cp -L "$lib" "$out/lib/"
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
du -sh "$out"
