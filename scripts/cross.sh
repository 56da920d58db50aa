#!/usr/bin/env bash
# Cross-target checks: the core crate (and the FFI crate, once it exists) must
# compile for iOS, macOS and Android.
#
# No Xcode, Apple SDK or Android NDK is needed: clippy only type-checks, and a
# staticlib is an archive, so no linker runs. That is also the limit of what
# this proves: nothing here links or runs on an Apple device or Android.
#
# A target that cannot be installed is reported on a `MISSING:` line and
# skipped; a target that is installed but does not compile fails the script.
# Usage: scripts/cross.sh [TARGET...]   (default: all targets below)
set -uo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(aarch64-apple-ios aarch64-apple-darwin x86_64-apple-darwin aarch64-linux-android)
# Targets for which the FFI staticlib is built (what the mobile apps link).
STATICLIB_TARGETS=" aarch64-apple-ios aarch64-linux-android "

if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi

step() { printf '\n==> %s\n' "$*"; }

# Whether the standard library of target $1 is installed for the active
# toolchain, or for toolchain $2 (works with or without rustup).
installed() {
  local sysroot
  sysroot="$(rustc ${2:+"+$2"} --print sysroot 2>/dev/null)" || return 1
  [ -d "$sysroot/lib/rustlib/$1/lib" ]
}

# When the distribution server offers no standard library of a target for
# the pinned toolchain (seen here: aarch64-apple-ios for 1.99.1), the
# target is still type-checked with the newest toolchain that has it, with
# --ignore-rust-version: the code checked is the same, only the compiler
# is older (the crates built for mobile use nothing newer).
FALLBACK_TOOLCHAIN="${WAKEMETER_CROSS_FALLBACK_TOOLCHAIN:-1.95.0}"
fallback_for() {
  command -v rustup >/dev/null 2>&1 || return 1
  if ! rustup toolchain list | grep -q "^${FALLBACK_TOOLCHAIN}-"; then
    rustup toolchain install "$FALLBACK_TOOLCHAIN" --profile minimal -c clippy >/dev/null 2>&1 || return 1
  fi
  installed "$1" "$FALLBACK_TOOLCHAIN" || rustup target add --toolchain "$FALLBACK_TOOLCHAIN" "$1" >/dev/null 2>&1
  installed "$1" "$FALLBACK_TOOLCHAIN"
}

have_ffi=0
if [ -d crates/ffi ]; then have_ffi=1; fi

summary=()
failed=0
missing=0

for t in "${TARGETS[@]}"; do
  if ! installed "$t"; then
    step "rustup target add $t"
    if command -v rustup >/dev/null 2>&1; then
      rustup target add "$t" || true
    fi
  fi
  # The cargo of this target: the pinned one, or the fallback toolchain.
  cargo_t=(cargo)
  via=""
  if ! installed "$t"; then
    if fallback_for "$t"; then
      cargo_t=(cargo "+$FALLBACK_TOOLCHAIN")
      via=" (with Rust $FALLBACK_TOOLCHAIN: no $t standard library for the pinned toolchain on the distribution server)"
      echo "note: $t is checked with Rust $FALLBACK_TOOLCHAIN and --ignore-rust-version: the pinned toolchain's standard library for it cannot be downloaded" >&2
    else
      echo "MISSING: Rust target $t could not be installed (rustup target add $t failed or rustup is absent); its cross checks are SKIPPED" >&2
      summary+=("$(printf '%-24s MISSING (target not installed; skipped)' "$t")")
      missing=$((missing + 1))
      continue
    fi
  fi
  if [ ${#cargo_t[@]} -gt 1 ]; then
    cargo() { command cargo "${cargo_t[1]}" "$1" --ignore-rust-version "${@:2}"; }
  else
    unset -f cargo
  fi

  done_steps=()
  bad=""

  step "cargo clippy -p wakemeter --target $t -- -D warnings"
  if cargo clippy -p wakemeter --target "$t" -- -D warnings; then
    done_steps+=("clippy wakemeter")
  else
    bad="clippy wakemeter"
  fi

  if [ -z "$bad" ] && [ "$have_ffi" = 1 ]; then
    step "cargo clippy -p wakemeter-ffi --target $t -- -D warnings"
    if cargo clippy -p wakemeter-ffi --target "$t" -- -D warnings; then
      done_steps+=("clippy wakemeter-ffi")
    else
      bad="clippy wakemeter-ffi"
    fi
  fi

  if [ -z "$bad" ] && [ "$have_ffi" = 1 ] && [[ "$STATICLIB_TARGETS" == *" $t "* ]]; then
    # `cargo rustc --crate-type staticlib` rather than `cargo build`: the crate
    # also declares a cdylib, and linking that would need the target's SDK/NDK.
    step "cargo rustc -p wakemeter-ffi --lib --release --target $t --crate-type staticlib"
    lib="${CARGO_TARGET_DIR:-target}/$t/release/libwakemeter_ffi.a"
    if cargo rustc -p wakemeter-ffi --lib --release --target "$t" --crate-type staticlib && [ -s "$lib" ]; then
      size=$(awk -v b="$(wc -c <"$lib")" 'BEGIN { printf "%.1f", b / 1048576 }')
      done_steps+=("staticlib ${size} MiB")
    else
      bad="staticlib wakemeter-ffi (expected $lib)"
    fi
  fi

  if [ -z "$bad" ] && [ "$t" = aarch64-linux-android ]; then
    # The Perfetto track events for Android's traced: the Rust side only.
    # The vendored C++ of perfetto-sdk-sys needs the NDK's sysroot, which
    # is not needed here: the prebuilt feature links a libperfetto_c that
    # nothing links in a type check.
    step "cargo clippy -p wakemeter-perfetto --features track-events-prebuilt --target $t -- -D warnings"
    if PERFETTO_SYS_LIB_DIR=/nonexistent cargo clippy -p wakemeter-perfetto \
      --features track-events-prebuilt --target "$t" -- -D warnings; then
      done_steps+=("clippy wakemeter-perfetto track events")
    else
      bad="clippy wakemeter-perfetto --features track-events-prebuilt"
    fi
  fi

  if [ -n "$bad" ]; then
    summary+=("$(printf '%-24s FAILED: %s' "$t" "$bad")")
    failed=$((failed + 1))
  else
    note=""
    if [ "$have_ffi" = 0 ]; then note=" (no crates/ffi yet: FFI checks skipped)"; fi
    joined=$(IFS=,; echo "${done_steps[*]}")
    summary+=("$(printf '%-24s ok: %s%s%s' "$t" "${joined//,/, }" "$note" "$via")")
  fi
done

step "cross-target summary"
for line in "${summary[@]}"; do echo "cross: $line"; done
if [ "$missing" -gt 0 ]; then
  echo "MISSING: $missing cross target(s) could not be installed and were not checked" >&2
fi
if [ "$failed" -gt 0 ]; then
  echo "cross: $failed target(s) FAILED" >&2
  exit 1
fi
