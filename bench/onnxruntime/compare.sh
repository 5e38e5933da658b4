#!/usr/bin/env bash
# bench/onnxruntime/compare.sh [BUILD] [RUNS]: autopar's executor against onnxruntime, side by
# side on one thread, on torchvision's mobile CNNs (inference, batch 1). Needs /usr/bin/python3
# with torch and torchvision (Debian's python3-torch, python3-torchvision), node and npm;
# onnxruntime-node comes from the npm registry into $ORT_DIR (a reference for this script
# only, not a build dependency). Prints each model's steady-state median and the ratio
# onnxruntime / autopar (1 = as fast, 0.5 = half its speed). Run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-30}
work=${WORK:-${TMPDIR:-/tmp}/autopar-vs-onnxruntime}
ort_dir=${ORT_DIR:-$work/npm}
mkdir -p "$work" "$ort_dir"
if [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  # The package carries its CPU binaries; the GPU ones it would download are not wanted.
  (cd "$ort_dir" && ONNXRUNTIME_NODE_INSTALL_CUDA=skip npm install --silent onnxruntime-node >/dev/null)
fi
/usr/bin/python3 bench/onnxruntime/export_models.py "$work" 2>/dev/null
version=$(node -p "require('$ort_dir/node_modules/onnxruntime-node/package.json').version")
printf '%-22s %14s %18s %8s %14s\n' model "autopar (ms)" "onnxruntime (ms)" ratio "max rel diff"
for model in mobilenet_v2 mobilenet_v3_small mobilenet_v3_large mobilenet_v3_small_bn; do
  rm -rf "$work/outputs" && mkdir -p "$work/outputs"
  "$build/autopar" run "$work/$model.onnx" --inputs "$work/inputs" --outputs "$work/outputs" \
    --threads 1 --repeat "$runs" --json > "$work/autopar.json"
  node bench/onnxruntime/ort.js "$ort_dir/node_modules/onnxruntime-node" "$work/input.f32" \
    "$runs" "$work/$model.onnx" > "$work/ort.json"
  /usr/bin/python3 bench/onnxruntime/row.py "$model" "$work/autopar.json" "$work/ort.json" \
    "$work/outputs/output_0.pb"
done
echo "onnxruntime-node $version, one thread each; ratio = onnxruntime's time / autopar's;"
echo "max rel diff = the largest |autopar − onnxruntime| of the outputs over their largest |value|"
