#!/usr/bin/env bash
# Lowers a few schemes for 4 devices and verifies each plan with 4 MPI ranks (schemes named
# *inference* lower the forward graph alone).
# usage: verify_plans.sh AUTOPAR MPIRUN SCHEME_DIR WORK_DIR
set -euo pipefail
autopar=$1 mpirun=$2 schemes=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
for scheme in "$schemes"/*.yaml; do
  name=$(basename "$scheme" .yaml)
  model=${name%%.*}
  loss=()
  if [[ $name == *inference* ]]; then loss=(--loss none); fi
  "$autopar" transform "$model" --scheme "$scheme" "${loss[@]}" -o "$work/$name" > /dev/null
  "$mpirun" --oversubscribe --allow-run-as-root -np 4 "$autopar" verify "$work/$name" --comm mpi
done
