#!/usr/bin/env bash
# The main job: builds and runs `wakemeter demo` (see README). Installs clang
# for the eBPF programs when it can; the demo runs without eBPF otherwise.
# Extra arguments go to the demo, e.g. `scripts/demo.sh --seconds 20`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_rust
ensure_clang || true
exec cargo run --release -q -p wakemeter-cli -- demo "$@"
