#!/usr/bin/env bash
# Tests of the C API (crates/capi): header staleness, the C programs under
# AddressSanitizer + LeakSanitizer + UBSan (clang), the libevent adapter with
# the poll and epoll backends, and a pkg-config build.
#   scripts/c-test.sh          the tests (installs clang, libclang-rt, libevent-dev, pkg-config)
#   scripts/c-test.sh --bench  also the wait-pair bench against a release build
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_c_deps

step() { printf '\n--> %s\n' "$*"; }
SECONDS=0
root="$PWD"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="$target_dir/c-tests"
mkdir -p "$out"
lib="$target_dir/debug"

step "header include/wakemeter.h is up to date; Rust unit tests of the C layer"
cargo test -q -p wakemeter-capi

step "build libwakemeter (debug)"
cargo build -q -p wakemeter-capi

CC=clang
SAN=(-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
CFLAGS=(-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -Iinclude -Icrates/capi/c/tests)
LINK=(-L"$lib" -lwakemeter -Wl,-rpath,"$lib")
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=99"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

run() { # name, command...: fails on a non-zero exit or any sanitizer report
  local name=$1 log="$out/$1.log"
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    echo "FAILED: $name" >&2
    exit 1
  fi
  if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
    cat "$log"
    echo "FAILED: $name (sanitizer report)" >&2
    exit 1
  fi
  cat "$log"
}

step "C API error paths (ASan/LSan/UBSan)"
$CC "${SAN[@]}" "${CFLAGS[@]}" crates/capi/c/tests/api_errors.c -o "$out/api_errors" "${LINK[@]}"
run api_errors "$out/api_errors"

step "C++ compiles the header"
clang++ -std=c++17 -Wall -Wextra -Werror -Iinclude -x c++ -fsyntax-only include/wakemeter.h

step "libevent adapter: spinning, healthy and EV_ET loops, poll and epoll (ASan/LSan/UBSan)"
$CC "${SAN[@]}" "${CFLAGS[@]}" crates/capi/c/tests/libevent_loop.c crates/capi/c/wakemeter_libevent.c \
  -o "$out/libevent_loop" "${LINK[@]}" -levent
run spin-poll env EVENT_NOEPOLL=1 "$out/libevent_loop" spin poll
run healthy-poll env EVENT_NOEPOLL=1 "$out/libevent_loop" healthy poll
run spin-epoll "$out/libevent_loop" spin epoll
run healthy-epoll "$out/libevent_loop" healthy epoll
# EV_ET on a backend without edge triggering: the loop never blocks; on epoll (the control) it is quiet.
run ready-poll env EVENT_NOEPOLL=1 "$out/libevent_loop" ready poll
run ready-epoll "$out/libevent_loop" ready epoll

step "pkg-config: cc app.c \$(pkg-config --cflags --libs wakemeter)"
PROFILE=debug scripts/c-install.sh >/dev/null
pc_dir="$target_dir/pkgconfig"
# shellcheck disable=SC2046
cc -Wall -Werror crates/capi/c/tests/pkgconfig_app.c -o "$out/pkgconfig_app" \
  $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs wakemeter)
run pkgconfig_app env LD_LIBRARY_PATH="$lib" "$out/pkgconfig_app"

step "install: versioned library names, SONAME, ldconfig's step, pkg-config from the installed .pc"
soname=$(readelf -d "$lib/libwakemeter.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
fail() { echo "FAILED: $*" >&2; exit 1; }
[ -n "$soname" ] || fail "libwakemeter.so has no SONAME"
echo "SONAME $soname"
prefix="$out/prefix"
rm -rf "$prefix" "$out/stage"
# A prefix the loader does not search: ldconfig is skipped, the rpath finds it.
PROFILE=debug scripts/c-install.sh "$prefix" | tee "$out/install.log"
grep -q '^ldconfig: skipped' "$out/install.log" || fail "ldconfig was not skipped for $prefix"
real=$(readlink "$prefix/lib/$soname") || fail "$soname is not a link"
{ [ -f "$prefix/lib/$real" ] && [ ! -L "$prefix/lib/$real" ]; } || fail "$soname -> $real is not the library file"
[ "$(readlink "$prefix/lib/libwakemeter.so")" = "$soname" ] || fail "libwakemeter.so does not link to $soname"
ls -l "$prefix/lib"
# shellcheck disable=SC2046
cc -Wall -Werror crates/capi/c/tests/pkgconfig_app.c -o "$out/installed_app" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs wakemeter) -Wl,-rpath,"$prefix/lib"
readelf -d "$out/installed_app" | grep -F "Shared library: [$soname]" || fail "installed_app does not need $soname"
run installed_app "$out/installed_app"
# Staged for a package (DESTDIR): the files under it, the .pc naming the prefix.
DESTDIR="$out/stage" PROFILE=debug scripts/c-install.sh /usr/local | tee "$out/stage.log"
grep -q '^ldconfig: skipped (DESTDIR' "$out/stage.log" || fail "ldconfig was not skipped with DESTDIR"
[ -L "$out/stage/usr/local/lib/$soname" ] || fail "DESTDIR: no $soname"
grep -qx 'libdir=/usr/local/lib' "$out/stage/usr/local/lib/pkgconfig/wakemeter.pc" || fail "DESTDIR: the .pc does not name the prefix"

step "bench compiles and runs (debug library: no figure to compare)"
$CC -O2 "${CFLAGS[@]}" crates/capi/c/tests/bench.c -o "$out/bench_debug" "${LINK[@]}"
run bench_debug "$out/bench_debug" 20000

if [ "${1:-}" = "--bench" ]; then
  step "bench: wait pair through the C API vs two clock_gettime (release library)"
  cargo build -q --release -p wakemeter-capi
  rel="$target_dir/release"
  $CC -O2 "${CFLAGS[@]}" crates/capi/c/tests/bench.c -o "$out/bench" -L"$rel" -lwakemeter -Wl,-rpath,"$rel"
  $CC -O2 "${CFLAGS[@]}" crates/capi/c/tests/bench.c -o "$out/bench_static" "$rel/libwakemeter.a" -lpthread -ldl -lm
  echo "shared library:"; "$out/bench"
  echo "static library:"; "$out/bench_static"
fi

step "C tests passed in ${SECONDS}s"
