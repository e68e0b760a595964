#!/usr/bin/env bash
# Install.ExternalProjectFindsAndRunsAttnc: attnc as another project uses it.
#
#   bash tests/install/check_install.sh BUILD_DIR
#
# Installs the (already built) BUILD_DIR into a fresh temporary prefix with
# `cmake --install`, checks what was installed (the libraries, the public
# headers and not the internal one, the CLI where it is built, nothing that
# points back into the build tree, nothing ldd cannot find), configures and
# builds examples/ as a separate project against it (find_package(attnc)),
# runs jit_fixed, links two C programs through pkg-config, then moves the
# prefix elsewhere and does it again from there: the RPATHs are
# $ORIGIN-relative and the .pc files find their prefix from their own place.
# The compilers, ccache, ninja and the install directories are read from
# BUILD_DIR/CMakeCache.txt. Exits non-zero at the first failing step; set
# ATTNC_KEEP_INSTALL_TEST=1 to keep the temporary directory.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
cache=$build/CMakeCache.txt
[ -f "$cache" ] || { echo "check_install: $cache not found" >&2; exit 2; }

# cached VAR: the value of VAR in the build's cache ("" when absent).
cached() { sed -n "/^$1:/{s/^$1:[A-Z]*=//p;q}" "$cache"; }
source_dir=$(cached CMAKE_HOME_DIRECTORY)
cxx=$(cached CMAKE_CXX_COMPILER)
cc=$(cached CMAKE_C_COMPILER)
make_program=$(cached CMAKE_MAKE_PROGRAM)
libdir=$(cached CMAKE_INSTALL_LIBDIR)
bindir=$(cached CMAKE_INSTALL_BINDIR)
includedir=$(cached CMAKE_INSTALL_INCLUDEDIR)
with_cli=$(cached ATTNC_WITH_CLI)
with_halide=$(cached ATTNC_WITH_HALIDE)
ccache=$(cached CCACHE_PROGRAM)
launcher=()
case $ccache in
  "" | *-NOTFOUND) ;;
  *) launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ccache") ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnc-install-test.XXXXXX")
if [ -z "${ATTNC_KEEP_INSTALL_TEST:-}" ]; then
  trap 'rm -rf "$tmp"' EXIT
else
  echo "check_install: keeping $tmp"
fi
export ATTNC_CACHE_DIR=$tmp/jit-cache

step() { echo "== $*"; }
fail() {
  echo "check_install: FAILED: $*" >&2
  exit 1
}
is_on() { case ${1^^} in ON | 1 | TRUE | YES | Y) return 0 ;; *) return 1 ;; esac; }

# check_tree PREFIX: what must (and must not) be installed, RUNPATHs, ldd.
check_tree() {
  local prefix=$1 f
  local expect=("$libdir/libattnc.so" "$libdir/libattnc_jit.so"
    "$includedir/attnc/attnc.h" "$includedir/attnc/attnc.hpp" "$includedir/attnc/attnc_jit.h"
    "$libdir/cmake/attnc/attncConfig.cmake" "$libdir/cmake/attnc/attncConfigVersion.cmake"
    "$libdir/cmake/attnc/attncTargets.cmake"
    "$libdir/pkgconfig/attnc.pc" "$libdir/pkgconfig/attnc-jit.pc")
  is_on "$with_cli" && expect+=("$bindir/attnc")
  is_on "$with_halide" && expect+=("$libdir/libattnc_halidegen.so")
  for f in "${expect[@]}"; do
    [ -f "$prefix/$f" ] || fail "$prefix/$f was not installed"
  done
  [ ! -e "$prefix/$includedir/attnc/runtime" ] || fail "the internal header directory attnc/runtime/ was installed"
  if ! is_on "$with_cli" && [ -e "$prefix/$bindir/attnc" ]; then
    fail "the CLI was installed although ATTNC_WITH_CLI is off"
  fi
  if grep -rIl -- "$build" "$prefix" >/dev/null; then
    fail "installed text files name the build tree: $(grep -rIl -- "$build" "$prefix" | tr '\n' ' ')"
  fi
  local binaries=("$prefix/$libdir"/libattnc*.so)
  is_on "$with_cli" && binaries+=("$prefix/$bindir/attnc")
  for f in "${binaries[@]}"; do
    local runpath
    runpath=$(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
    case $runpath in *"$build"*) fail "$f's RUNPATH names the build tree: $runpath" ;; esac
    # (ldd's output is read whole: `grep -q` stops at the first match, and
    # under pipefail the SIGPIPE it leaves ldd fails the pipeline.)
    local deps
    deps=$(ldd "$f")
    if grep -q "not found" <<<"$deps"; then
      echo "$deps" >&2
      fail "$f needs a library that cannot be found"
    fi
  done
  local jit_runpath
  jit_runpath=$(readelf -d "$prefix/$libdir/libattnc_jit.so" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
  case $jit_runpath in *"\$ORIGIN"*) ;; *) fail "libattnc_jit.so's RUNPATH has no \$ORIGIN: '$jit_runpath'" ;; esac
  grep -q "libattnc.so => $prefix/$libdir/libattnc.so" <<<"$(ldd "$prefix/$libdir/libattnc_jit.so")" ||
    fail "libattnc_jit.so does not find the libattnc.so next to it"
}

# build_examples PREFIX DIR: examples/ as a project of its own, found
# attnc through CMAKE_PREFIX_PATH only; then runs jit_fixed.
build_examples() {
  local prefix=$1 dir=$2
  cmake -S "$source_dir/examples" -B "$dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$make_program" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  local found
  found=$(sed -n 's/^attnc_DIR:[A-Z]*=//p' "$dir/CMakeCache.txt")
  [ "$found" = "$prefix/$libdir/cmake/attnc" ] || fail "find_package(attnc) found '$found', not $prefix"
  cmake --build "$dir"
  "$dir/jit_fixed" "$source_dir/patterns/fixed.attn" 300 16 2 fused || fail "jit_fixed against $prefix"
}

# pkg_config_programs PREFIX OUTDIR: the two C programs, compiled and linked
# with pkg-config's flags, an $ORIGIN RPATH when OUTDIR is PREFIX/bin.
pkg_config_programs() {
  local prefix=$1 out=$2 rpath=$3 flags
  export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
  command -v pkg-config >/dev/null || fail "pkg-config is not installed (Debian: pkg-config)"
  flags=$(pkg-config --cflags --libs attnc)
  echo "pkg-config --cflags --libs attnc: $flags"
  case $flags in *-lattnc*) ;; *) fail "pkg-config attnc gives no -lattnc" ;; esac
  # shellcheck disable=SC2086 # pkg-config's output is a list of flags
  "$cc" -std=c11 -Wall -Werror "$source_dir/tests/install/status.c" -o "$out/attnc_status" $flags -Wl,-rpath,"$rpath"
  flags=$(pkg-config --cflags --libs attnc-jit)
  echo "pkg-config --cflags --libs attnc-jit: $flags"
  # shellcheck disable=SC2086
  "$cc" -std=c11 -Wall -Werror "$source_dir/tests/install/jit.c" -o "$out/attnc_jit_c" $flags -lm -Wl,-rpath,"$rpath"
}

run_programs() {
  local dir=$1
  "$dir/attnc_status" || fail "$dir/attnc_status"
  "$dir/attnc_jit_c" "$source_dir/patterns/fixed.attn" || fail "$dir/attnc_jit_c"
  if is_on "$with_cli"; then
    "$dir/attnc" --version || fail "$dir/attnc --version"
    "$dir/attnc" check "$source_dir/patterns/fixed.attn" || fail "$dir/attnc check"
  fi
}

prefix=$tmp/prefix
step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix"
check_tree "$prefix"

step "examples/ as a project of its own against $prefix"
build_examples "$prefix" "$tmp/examples"

step "C programs through pkg-config, into $prefix/$bindir with an \$ORIGIN RPATH"
mkdir -p "$prefix/$bindir"
pkg_config_programs "$prefix" "$prefix/$bindir" "\$ORIGIN/$(realpath -m --relative-to="/p/$bindir" "/p/$libdir")"
run_programs "$prefix/$bindir"

moved=$tmp/moved/elsewhere
step "the install tree moved to $moved"
mkdir -p "$(dirname "$moved")"
mv "$prefix" "$moved"
check_tree "$moved"
run_programs "$moved/$bindir"
mkdir -p "$tmp/pc-moved"
pkg_config_programs "$moved" "$tmp/pc-moved" "$moved/$libdir"
"$tmp/pc-moved/attnc_status" || fail "attnc_status built against the moved tree"
"$tmp/pc-moved/attnc_jit_c" "$source_dir/patterns/fixed.attn" || fail "attnc_jit_c built against the moved tree"
build_examples "$moved" "$tmp/examples-moved"

echo "check_install: OK"
