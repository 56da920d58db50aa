#!/usr/bin/env bash
# Runs the Kotlin binding tests on the JVM: checks that the committed
# bindings match the Rust API, builds the host library and runs `mvn test`
# in bindings/kotlin with jna.library.path pointing at it.
# Maven downloads its plugins and dependencies on the first run (~96 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=0
for tool in cargo java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case "$tool" in
      cargo) echo "MISSING: cargo (install rustup; rust-toolchain.toml pins the version)" >&2 ;;
      java) echo "MISSING: java (a JDK 17 or newer, e.g. apt-get install openjdk-17-jdk-headless)" >&2 ;;
      mvn) echo "MISSING: mvn (Apache Maven 3.8+, e.g. apt-get install maven)" >&2 ;;
    esac
    missing=1
  fi
done
[ "$missing" -eq 0 ] || exit 1

# Also builds the release library the tests load.
scripts/bindings.sh --check

target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
lib_dir="$target_dir/release"

echo "==> mvn test (bindings/kotlin)" >&2
if ! (cd bindings/kotlin && mvn -B -ntp -Dwakemeter.lib.dir="$lib_dir" clean test "$@"); then
  if ! (cd bindings/kotlin && mvn -B -q -o dependency:resolve >/dev/null 2>&1) &&
    ! (cd bindings/kotlin && mvn -B -q dependency:resolve >/dev/null 2>&1); then
    echo "MISSING: Maven could not download the Kotlin plugin or dependencies (no access to Maven Central?)" >&2
  fi
  exit 1
fi
