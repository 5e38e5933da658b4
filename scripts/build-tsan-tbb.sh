#!/usr/bin/env bash
# Builds a ThreadSanitizer-instrumented libtbb for `make test-tsan`: TSan sees the
# happens-before edges of TBB's scheduler only when libtbb itself is instrumented, so against
# Debian's libtbb every parallel_for body reads as a race. Builds Debian's source of the
# installed libtbb-dev version (the headers the build compiles against are then the library's
# own; checked) with clang and -fsanitize=thread, and puts libtbb.so* into PREFIX/lib.
# Usage: scripts/build-tsan-tbb.sh PREFIX     (about 4 minutes on 2 cores; safe to run again)
set -euo pipefail
prefix=${1:?usage: scripts/build-tsan-tbb.sh PREFIX}
version=$(dpkg-query -W -f='${source:Version}' libtbb-dev)
source_name=$(dpkg-query -W -f='${source:Package}' libtbb-dev)
if [ -f "$prefix/version" ] && [ "$(cat "$prefix/version")" = "$version" ]; then
  echo "build-tsan-tbb: $prefix holds $source_name $version, built with TSan"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Debian's source packages: add deb-src entries next to the binary ones if there are none.
if ! apt-get source --download-only "$source_name=$version" >/dev/null 2>&1; then
  list=/etc/apt/sources.list.d/debian.sources
  [ -f "$list" ] || { echo "build-tsan-tbb: no $list to derive deb-src entries from" >&2; exit 1; }
  sed 's/^Types: deb$/Types: deb-src/' "$list" | "${sudo_cmd[@]}" tee /etc/apt/sources.list.d/autopar-deb-src.sources >/dev/null
  "${sudo_cmd[@]}" apt-get update -qq
  apt-get source --download-only "$source_name=$version" >/dev/null
fi
dpkg-source -x ./*.dsc src >/dev/null
if ! diff -rq /usr/include/oneapi src/include/oneapi >/dev/null; then
  echo "build-tsan-tbb: the headers of $source_name $version differ from /usr/include/oneapi" >&2
  exit 1
fi
cmake -S src -B build -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF \
  -DTBB_STRICT=OFF >/dev/null
cmake --build build -j "${JOBS:-$(nproc)}" --target tbb >/dev/null
mkdir -p "$prefix/lib"
find build -name 'libtbb.so*' -exec cp -P {} "$prefix/lib/" \;
echo "$version" > "$prefix/version"
echo "build-tsan-tbb: $source_name $version with TSan in $prefix/lib"
