#!/usr/bin/env bash
# Reads every Perfetto trace the tests write with Perfetto's own schema:
# installs PyPI `perfetto` (perfetto.protos.perfetto.trace.perfetto_trace_pb2)
# into a virtualenv under the target directory, then runs the trace tests
# of wakemeter-perfetto and of the CLI with WAKEMETER_PERFETTO_PYTHON set,
# so that tests/check_trace.py checks every trace (tracks, counter values
# against the sampler's own intervals, findings with their text). As root
# the full-disk test (a 64 KiB tmpfs) runs too. The track events of the
# track-events feature are read the same way, from sessions of the test:
# in process, then through a tracing service of another process.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
venv="$target_dir/perfetto-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "MISSING: python3 venv (apt-get install python3-venv): Perfetto traces not read with Perfetto's schema" >&2
    exit 1
  fi
  if ! "$venv/bin/pip" install --quiet perfetto; then
    echo "MISSING: PyPI perfetto (pip install perfetto failed): Perfetto traces not read with Perfetto's schema" >&2
    exit 1
  fi
fi
export WAKEMETER_PERFETTO_PYTHON="$venv/bin/python"
ignored=()
if [ "$(id -u)" -eq 0 ]; then ignored=(-- --include-ignored); fi
cargo test -p wakemeter-perfetto --test trace "${ignored[@]}"
# Track events into an in-process Perfetto session (feature track-events:
# the SDK's vendored C library, about 20 s of C++ compile when cold).
cargo test -p wakemeter-perfetto --features track-events --test track_events
# The same tests through a tracing service of another process: the system
# backend over UNIX sockets, against mini_traced (the IPC host of the SDK's
# vendored sources, as traced has it: about 25 s of C++ the first time,
# kept in the cache directory below).
sdk_sys="$(cargo metadata --format-version 1 --all-features |
  "$venv/bin/python" -c 'import json, sys
print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "perfetto-sdk-sys"))')"
sdk_src="$(dirname "$sdk_sys")/libperfetto_c"
mini_src=crates/perfetto/tests/mini_traced.cc
# Kept in the cache directory the Swift root uses (a fresh clone, as CI's,
# then skips the 25 s of C++), named by the SDK's version and the source's
# hash; under the target directory when that is not writable.
cache_dir="${WAKEMETER_CACHE_DIR:-/var/cache/wakemeter}"
mini_key="$(basename "$(dirname "$sdk_sys")")-$(sha256sum "$mini_src" | cut -c1-16)"
if mkdir -p "$cache_dir/perfetto-mini-traced" 2>/dev/null && [ -w "$cache_dir/perfetto-mini-traced" ]; then
  mini="$cache_dir/perfetto-mini-traced/$mini_key/mini_traced"
else
  mini="$target_dir/perfetto-mini-traced/$mini_key/mini_traced"
fi
if [ ! -x "$mini" ]; then
  mkdir -p "$(dirname "$mini")"
  # Built aside and moved in whole: an interrupted build leaves nothing
  # that looks finished.
  "${CXX:-clang++}" -std=c++17 -O0 -DNDEBUG -w -I"$sdk_src" -o "$mini.tmp.$$" "$mini_src" -lpthread
  mv -f "$mini.tmp.$$" "$mini"
fi
sockets="$(mktemp -d)"
"$mini" "$sockets/producer" "$sockets/consumer" 2>"$sockets/log" &
traced_pid=$!
trap 'kill "$traced_pid" 2>/dev/null || true; rm -rf "$sockets"' EXIT
# Waits for the service's socket with a hang guard of minutes (a loaded
# machine may take far longer than a second to start it), not a count of
# tries that a busy machine uses up.
waited=0
until [ -S "$sockets/consumer" ]; do
  if [ "$waited" -ge 3000 ] || ! kill -0 "$traced_pid" 2>/dev/null; then
    echo "perfetto-test: the test service never opened its socket:" >&2
    cat "$sockets/log" >&2
    exit 1
  fi
  sleep 0.1
  waited=$((waited + 1))
done
WAKEMETER_PERFETTO_SYSTEM=1 PERFETTO_PRODUCER_SOCK_NAME="$sockets/producer" \
  PERFETTO_CONSUMER_SOCK_NAME="$sockets/consumer" \
  cargo test -p wakemeter-perfetto --features track-events --test track_events
kill "$traced_pid"
cargo test -p wakemeter-cli --test perfetto
