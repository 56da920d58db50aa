#!/usr/bin/env bash
# Regenerates the Kotlin and Swift bindings from the built wakemeter_ffi
# library (uniffi "library mode") and writes them where the Kotlin and Swift
# packages expect them. The generated files are committed; never edit them.
#
#   scripts/bindings.sh           rebuild the library and regenerate the files
#   scripts/bindings.sh --check   fail if the committed files differ from what
#                                 the current Rust API generates (stale bindings)
#
# Environment: CARGO_TARGET_DIR (default: cargo's), WAKEMETER_PROFILE
# (release or dev; default release, the build the Kotlin tests load).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=write
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if ! command -v cargo >/dev/null 2>&1; then
  echo "MISSING: cargo (install rustup; rust-toolchain.toml pins the version)" >&2
  exit 1
fi

profile="${WAKEMETER_PROFILE:-release}"
case "$profile" in
  release) profile_dir=release ;;
  dev | debug) profile=dev; profile_dir=debug ;;
  *) echo "WAKEMETER_PROFILE must be release or dev" >&2; exit 2 ;;
esac

target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
case "$(uname -s)" in
  Darwin) lib_file=libwakemeter_ffi.dylib ;;
  *) lib_file=libwakemeter_ffi.so ;;
esac
lib="$target_dir/$profile_dir/$lib_file"

echo "==> building wakemeter-ffi ($profile)" >&2
cargo build -q -p wakemeter-ffi --profile "$profile"
echo "==> building uniffi-bindgen" >&2
cargo build -q -p wakemeter-uniffi-bindgen
bindgen="$target_dir/debug/uniffi-bindgen"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Two crates export: the core (`wakemeter`, its records behind the `uniffi`
# feature) and `wakemeter_ffi` (the objects). bindgen.toml names their
# roots so each crate's uniffi.toml is found.
config=crates/ffi/bindgen.toml
"$bindgen" generate --no-format --config "$config" --language kotlin \
  --out-dir "$out/raw" "$lib" >/dev/null
# Both crates share the Swift module `Wakemeter`, and uniffi names a Swift
# file after its module: one crate per run, so neither file overwrites the other.
for crate in wakemeter wakemeter_ffi; do
  "$bindgen" generate --no-format --config "$config" --language swift --crate "$crate" \
    --out-dir "$out/swift-$crate" "$lib" >/dev/null
done

# Where each generated file lives in the repository.
kotlin_dir="$out/tree/kotlin/src/generated/kotlin/dev/wakemeter"
mkdir -p "$kotlin_dir/ffi" "$kotlin_dir/model" \
  "$out/tree/swift/Sources/Wakemeter/Generated" \
  "$out/tree/swift/Sources/WakemeterFFI"
mv "$out/raw/dev/wakemeter/ffi/wakemeter_ffi.kt" "$kotlin_dir/ffi/"
mv "$out/raw/dev/wakemeter/model/wakemeter.kt" "$kotlin_dir/model/"
mv "$out/swift-wakemeter/Wakemeter.swift" "$out/tree/swift/Sources/Wakemeter/Generated/WakemeterModel.swift"
mv "$out/swift-wakemeter/wakemeterFFI.h" "$out/tree/swift/Sources/WakemeterFFI/"
mv "$out/swift-wakemeter_ffi/Wakemeter.swift" "$out/tree/swift/Sources/Wakemeter/Generated/"
mv "$out/swift-wakemeter_ffi/wakemeter_ffiFFI.h" "$out/tree/swift/Sources/WakemeterFFI/"

generated=(
  kotlin/src/generated/kotlin/dev/wakemeter/ffi/wakemeter_ffi.kt
  kotlin/src/generated/kotlin/dev/wakemeter/model/wakemeter.kt
  swift/Sources/Wakemeter/Generated/Wakemeter.swift
  swift/Sources/Wakemeter/Generated/WakemeterModel.swift
  swift/Sources/WakemeterFFI/wakemeter_ffiFFI.h
  swift/Sources/WakemeterFFI/wakemeterFFI.h
)

if [ "$mode" = check ]; then
  stale=0
  for f in "${generated[@]}"; do
    if ! diff -q "$out/tree/$f" "bindings/$f" >/dev/null 2>&1; then
      echo "STALE: bindings/$f differs from what the Rust API generates" >&2
      diff -u "bindings/$f" "$out/tree/$f" 2>&1 | head -40 >&2 || true
      stale=1
    fi
  done
  if [ "$stale" -ne 0 ]; then
    echo "the committed bindings are stale: run scripts/bindings.sh and commit the result" >&2
    exit 1
  fi
  echo "bindings are up to date (${#generated[@]} files)"
else
  for f in "${generated[@]}"; do
    mkdir -p "bindings/$(dirname "$f")"
    cp "$out/tree/$f" "bindings/$f"
    echo "wrote bindings/$f"
  done
fi
