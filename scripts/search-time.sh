#!/usr/bin/env bash
# The search-time guard, for a developer on an idle machine (ctest judges plan quality only:
# no ctest verdict depends on the machine's speed or load).
#
#   scripts/search-time.sh [BUILD]            compare with bench/baselines/search_bench.json
#   scripts/search-time.sh [BUILD] --update   record that baseline on this machine
#
# Two checks: `autopar regress` over the plan-quality suite with `--search-time check` (a case
# whose search is over 2x its recorded time fails), and bench/search_bench (every search
# benchmark, real time) against its recorded baseline, failing where a benchmark takes over
# LIMIT times its baseline (default 1.5; SEARCH_TIME_LIMIT overrides). Exit 1 on a slower
# search, 2 on a usage error.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
update="${2:-}"
limit="${SEARCH_TIME_LIMIT:-1.5}"
baseline="$root/bench/baselines/search_bench.json"

for binary in "$build/autopar" "$build/bench/search_bench"; do
  if [[ ! -x "$binary" ]]; then
    echo "search-time: $binary is missing (build first: make build)" >&2
    exit 2
  fi
done
if [[ -n "$update" && "$update" != "--update" ]]; then
  echo "search-time: '$update' is not --update" >&2
  exit 2
fi

measured="$(mktemp)"
trap 'rm -f "$measured"' EXIT
"$build/bench/search_bench" --benchmark_format=json --benchmark_out="$measured" \
  --benchmark_out_format=json > /dev/null

if [[ "$update" == "--update" ]]; then
  cp "$measured" "$baseline.partial"
  mv "$baseline.partial" "$baseline"
  echo "search-time: $baseline recorded"
  exit 0
fi
if [[ ! -f "$baseline" ]]; then
  echo "search-time: no baseline at $baseline (record one with --update)" >&2
  exit 2
fi

status=0
"$build/autopar" regress "$root/configs/regress/suite.yaml" \
  --baseline "$root/bench/baselines/plan_quality.json" --search-time check || status=1

python3 - "$baseline" "$measured" "$limit" <<'EOF' || status=1
import json
import sys

baseline_path, measured_path, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])


def times(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    return {r["name"]: r["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[r["time_unit"]]
            for r in runs if r.get("run_type", "iteration") == "iteration"}


before, after = times(baseline_path), times(measured_path)
slower = []
print(f"{'benchmark':<48} {'baseline':>10} {'now':>10} {'ratio':>7}")
for name in sorted(after):
    if name not in before:
        print(f"{name:<48} {'-':>10} {after[name]:>9.3f}s {'new':>7}")
        continue
    ratio = after[name] / before[name]
    print(f"{name:<48} {before[name]:>9.3f}s {after[name]:>9.3f}s {ratio:>6.2f}x")
    if ratio > limit:
        slower.append(f"{name}: {ratio:.2f}x its baseline (limit {limit}x)")
for line in slower:
    print(f"search-time: {line}")
sys.exit(1 if slower else 0)
EOF
exit $status
