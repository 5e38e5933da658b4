#!/usr/bin/env bash
# Installs autopar's build and test dependencies from Debian's packages; safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libonnx-dev libonnx-testdata
  libprotobuf-dev protobuf-compiler
  libeigen3-dev libtbb-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  libssl-dev
  libmimalloc-dev
  python3-dev pybind11-dev
)

# The torch tests' oracle (PyTorch and torchvision for /usr/bin/python3), and Chromium for
# rendering autotune's report.html: installed when the package index has them; without them
# those tests skip (torch) or are not registered (report).
optional=(python3-torch python3-torchvision chromium)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

missing_optional=()
for p in "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing_optional+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]} ${missing_optional[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#missing_optional[@]} -gt 0 ]; then
  echo "install-deps: installing the torch tests' oracle: ${missing_optional[*]}"
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing_optional[@]}" ||
    echo "install-deps: ${missing_optional[*]} not installed; the torch tests will skip" >&2
fi
