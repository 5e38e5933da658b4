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
printf '%-22s %14s %18s %8s\n' model "autopar (ms)" "onnxruntime (ms)" ratio
for model in mobilenet_v2 mobilenet_v3_small mobilenet_v3_large; do
  ours=$("$build/autopar" run "$work/$model.onnx" --inputs "$work/inputs" --threads 1 \
    --repeat "$runs" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_s"])')
  theirs=$(node bench/onnxruntime/ort.js "$ort_dir/node_modules/onnxruntime-node" \
    "$work/input.f32" "$runs" "$work/$model.onnx" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_s"])')
  /usr/bin/python3 -c "print(f'{\"$model\":<22} {$ours*1e3:14.2f} {$theirs*1e3:18.2f} {$theirs/$ours:8.2f}')"
done
echo "onnxruntime-node $version, one thread each; ratio = onnxruntime's time / autopar's"
