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
# Only what the demo shows: the CLI with its eBPF kernel view, without the
# dependencies of the commands it does not run (profiles, top, the metrics
# endpoint, Perfetto traces; crates/cli/Cargo.toml, [features]). That
# roughly halves the crates a first run compiles. `cargo build --release -p
# wakemeter-cli` builds every command.
exec cargo run --release -q -p wakemeter-cli --no-default-features --features ebpf -- demo "$@"
