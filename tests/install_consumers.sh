#!/usr/bin/env bash
# The installed package from an engine's side (issue 23): installs a built
# cgdr (component `library`) into a temporary prefix, checks libcgdr.so's
# SONAME and exports, then builds and runs examples/ against that prefix alone:
# the C program through pkg-config with libcgdr.so, with libcgdr.a (cgdr-static,
# and cgdr --static where libcgdr.a is the only library), and the C++ program
# through find_package(cgdr CONFIG) with both libraries.
# Usage: install_consumers.sh BUILD_DIR [CC [CXX]]
set -euo pipefail
build=$(cd "$1" && pwd)
cc=${2:-cc}
cxx=${3:-c++}
examples=$(cd "$(dirname "$0")/../examples" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() { echo "install_consumers: $*" >&2; exit 1; }
# Runs a command quietly; on failure shows its output and stops.
quiet() { "$@" >"$work/log" 2>&1 || { cat "$work/log"; fail "failed: $*"; }; }
needs_libcgdr_so() { readelf -d "$1" | grep -q "NEEDED.*\[libcgdr\.so\.$major\]"; }

echo "== cmake --install --component library --prefix $prefix"
quiet cmake --install "$build" --component library --prefix "$prefix"
libdir=$(dirname "$(find "$prefix" -name libcgdr.a)")
header=$prefix/include/cgdr/version.h
major=$(sed -n 's/^#define CGDR_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
version=$major.$(sed -n 's/^#define CGDR_VERSION_MINOR \([0-9]*\)$/\1/p' "$header").$(sed -n 's/^#define CGDR_VERSION_PATCH \([0-9]*\)$/\1/p' "$header")

echo "== libcgdr.so $version: SONAME, exported symbols"
soname=$(readelf -d "$libdir/libcgdr.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libcgdr.so.$major" ] || fail "SONAME '$soname', expected libcgdr.so.$major"
exported=$(nm -D --defined-only "$libdir/libcgdr.so" | awk '{print $3}')
for f in $(sed -n 's/^CGDR_EXPORT .*\b\(cgdr_[a-z0-9_]*\)(.*/\1/p' "$prefix/include/cgdr/cgdr.h"); do
  grep -qx "$f" <<<"$exported" || fail "C API function $f is not exported"
done
# Besides the C API, only functions of the public C++ headers (the internals,
# Highway's and the C++ library's instances stay hidden).
for sym in $(grep -v '^cgdr_' <<<"$exported"); do
  name=$(c++filt "$sym" | sed 's/(.*//; s/\[abi:[^]]*\]//g; s/.*:://')
  [[ $(c++filt "$sym") == cgdr::* ]] && grep -qw -- "$name" "$prefix"/include/cgdr/*.hpp ||
    fail "exports $(c++filt "$sym"), which is not in the public headers"
done

export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion cgdr)" = "$version" ] || fail "cgdr.pc has version $(pkg-config --modversion cgdr)"
cflags=(-std=c11 -Wall -Wextra -Werror)  # and -lm after cgdr's flags: the example's own FP64 reference uses libm

echo "== C, libcgdr.so: cc c_consumer.c \$(pkg-config --cflags --libs cgdr)"
quiet "$cc" "${cflags[@]}" "$examples/c_consumer.c" $(pkg-config --cflags --libs cgdr) -lm -o "$work/c_shared"
needs_libcgdr_so "$work/c_shared" || fail "c_shared does not load libcgdr.so.$major"
LD_LIBRARY_PATH=$libdir "$work/c_shared"

echo "== C, libcgdr.a: cc c_consumer.c \$(pkg-config --cflags --libs cgdr-static)"
quiet "$cc" "${cflags[@]}" "$examples/c_consumer.c" $(pkg-config --cflags --libs cgdr-static) -lm -o "$work/c_static"
! needs_libcgdr_so "$work/c_static" || fail "c_static loads libcgdr.so"
"$work/c_static"

echo "== C, libcgdr.a alone in its prefix: cc c_consumer.c \$(pkg-config --cflags --libs --static cgdr)"
static_prefix=$work/static-prefix
mkdir -p "$static_prefix"
cp -r "$prefix/include" "$static_prefix/"
mkdir -p "$static_prefix/${libdir#"$prefix"/}/pkgconfig"
cp "$libdir/libcgdr.a" "$static_prefix/${libdir#"$prefix"/}/"
cp "$libdir/pkgconfig/cgdr.pc" "$static_prefix/${libdir#"$prefix"/}/pkgconfig/"
quiet env PKG_CONFIG_PATH="$static_prefix/${libdir#"$prefix"/}/pkgconfig" bash -c \
  "$cc ${cflags[*]} $examples/c_consumer.c \$(pkg-config --cflags --libs --static cgdr) -lm -o $work/c_static_only"
"$work/c_static_only"

echo "== C++: find_package(cgdr CONFIG REQUIRED), cgdr::cgdr and cgdr::cgdr_static"
quiet cmake -S "$examples" -B "$work/cpp" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=Release
found=$(sed -n 's/^cgdr_DIR:PATH=//p' "$work/cpp/CMakeCache.txt")
[ "$found" = "$libdir/cmake/cgdr" ] || fail "find_package found cgdr in '$found', not in $libdir/cmake/cgdr"
quiet cmake --build "$work/cpp" -j 2
needs_libcgdr_so "$work/cpp/cpp_consumer" || fail "cpp_consumer does not load libcgdr.so.$major"
! needs_libcgdr_so "$work/cpp/cpp_consumer_static" || fail "cpp_consumer_static loads libcgdr.so"
"$work/cpp/cpp_consumer"
"$work/cpp/cpp_consumer_static"
echo "install_consumers: all consumers built from $prefix and passed"
