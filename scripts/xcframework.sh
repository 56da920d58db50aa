#!/usr/bin/env bash
# Builds WakemeterFFI.xcframework: the static Rust library (wakemeter-ffi)
# for iOS devices, the iOS simulator and macOS (arm64 + x86_64 each), with
# the generated C headers and a module map, zipped for a SwiftPM
# `binaryTarget`. Prints the checksum and the line of Package.swift a
# release sets so apps get this framework instead of a local library.
#
# NEEDS A MAC WITH XCODE (xcodebuild, lipo, ditto) and rustup: it cannot run
# on Linux, and it has not been run by the Linux test suite
# (scripts/test.sh only type-checks the Apple targets, in scripts/cross.sh).
#
# Usage: scripts/xcframework.sh [RELEASE_URL]
#   RELEASE_URL: where the zip will be published (e.g. the GitHub release
#   asset URL); default: a placeholder to replace.
# Output: target/xcframework/WakemeterFFI.xcframework(.zip)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" != Darwin ]; then
  echo "MISSING: macOS with Xcode (xcodebuild makes XCFrameworks only on a Mac; run this script there)" >&2
  exit 1
fi
for tool in xcodebuild lipo ditto rustup cargo swift; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "MISSING: $tool (install Xcode and its command line tools, and rustup)" >&2
    exit 1
  fi
done

url="${1:-https://example.invalid/WakemeterFFI.xcframework.zip}"
device=(aarch64-apple-ios)
simulator=(aarch64-apple-ios-sim x86_64-apple-ios)
macos=(aarch64-apple-darwin x86_64-apple-darwin)

rustup target add "${device[@]}" "${simulator[@]}" "${macos[@]}"
for t in "${device[@]}" "${simulator[@]}" "${macos[@]}"; do
  echo "==> cargo build -p wakemeter-ffi --release --target $t" >&2
  cargo build -q -p wakemeter-ffi --release --target "$t"
done

target_dir="${CARGO_TARGET_DIR:-target}"
out="$target_dir/xcframework"
rm -rf "$out"
mkdir -p "$out/ios-simulator" "$out/macos" "$out/headers"
lib() { echo "$target_dir/$1/release/libwakemeter_ffi.a"; }
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$out/ios-simulator/libwakemeter_ffi.a"
lipo -create "$(lib aarch64-apple-darwin)" "$(lib x86_64-apple-darwin)" -output "$out/macos/libwakemeter_ffi.a"

# The headers and module map of the package's systemLibrary target, minus
# its `link` line: the binary target links the library itself.
cp bindings/swift/Sources/WakemeterFFI/*.h "$out/headers/"
grep -v '^ *link ' bindings/swift/Sources/WakemeterFFI/module.modulemap >"$out/headers/module.modulemap"

xcodebuild -create-xcframework \
  -library "$(lib aarch64-apple-ios)" -headers "$out/headers" \
  -library "$out/ios-simulator/libwakemeter_ffi.a" -headers "$out/headers" \
  -library "$out/macos/libwakemeter_ffi.a" -headers "$out/headers" \
  -output "$out/WakemeterFFI.xcframework"
(cd "$out" && ditto -c -k --sequesterRsrc --keepParent WakemeterFFI.xcframework WakemeterFFI.xcframework.zip)
checksum="$(swift package compute-checksum "$out/WakemeterFFI.xcframework.zip")"

cat <<EOF
Built $out/WakemeterFFI.xcframework.zip (checksum $checksum).
Publish it at $url, then set in the release's Package.swift:

let releaseFramework: (url: String, checksum: String)? = (
    url: "$url",
    checksum: "$checksum"
)

which makes the WakemeterFFI target
    .binaryTarget(name: "WakemeterFFI", url: "$url", checksum: "$checksum")
EOF
