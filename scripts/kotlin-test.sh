#!/usr/bin/env bash
# Runs the Kotlin binding tests on the JVM and tests the jar a JVM user
# gets:
# 1. checks that the committed bindings match the Rust API and builds the
#    host library (scripts/bindings.sh --check);
# 2. builds libwakemeter_ffi.so for the other Linux CPU too (aarch64 on an
#    x86_64 host, through scripts/arm64-test.sh --prereqs for the cross
#    linker); without the cross tools the jar carries the host's library
#    only, and this says so on a MISSING line;
# 3. `mvn package` in bindings/kotlin: the tests with jna.library.path
#    pointing at the host library, then the jar, with the libraries in
#    JNA's class-path layout (linux-x86-64/, linux-aarch64/);
# 4. installs that jar into a throwaway Maven repository and runs
#    bindings/kotlin/jar-test, a program with the jar as its one
#    dependency and no jna.library.path.
# Maven downloads its plugins and dependencies on the first run (~96 MB).
# Extra arguments go to the first `mvn` (e.g. -Dtest=CallCostBenchmarkTest).
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

# JNA's resource prefix for each Linux CPU (com.sun.jna.Platform.RESOURCE_PREFIX).
native_dir="$target_dir/jvm-native"
rm -rf "$native_dir"
case "$(uname -m)" in
  x86_64) host_prefix=linux-x86-64 other=aarch64 other_prefix=linux-aarch64 ;;
  aarch64) host_prefix=linux-aarch64 other="" other_prefix="" ;;
  *) host_prefix="" other="" other_prefix="" ;;
esac
packed=()
if [ -n "$host_prefix" ]; then
  mkdir -p "$native_dir/$host_prefix"
  cp "$lib_dir/libwakemeter_ffi.so" "$native_dir/$host_prefix/"
  packed+=("$host_prefix")
fi
if [ "$other" = aarch64 ]; then
  echo "==> cargo build -p wakemeter-ffi --release --target aarch64-unknown-linux-gnu" >&2
  # Installs the cross tools (qemu-user too, which only the arm64 tests
  # need: its absence alone does not stop the build here).
  scripts/arm64-test.sh --prereqs >&2 || true
  if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 &&
    CARGO_TARGET_DIR="$target_dir/arm64-qemu" \
      CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
      cargo build -p wakemeter-ffi --release --target aarch64-unknown-linux-gnu; then
    mkdir -p "$native_dir/$other_prefix"
    cp "$target_dir/arm64-qemu/aarch64-unknown-linux-gnu/release/libwakemeter_ffi.so" "$native_dir/$other_prefix/"
    packed+=("$other_prefix")
  else
    echo "MISSING: the aarch64 library (needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and rustup target add aarch64-unknown-linux-gnu): the jar carries ${packed[*]:-no native library} only" >&2
  fi
fi

echo "==> mvn package (bindings/kotlin): tests, then the jar with ${packed[*]:-no native library}" >&2
if ! (cd bindings/kotlin && mvn -B -ntp -Dwakemeter.lib.dir="$lib_dir" \
  -Dwakemeter.native.dir="$native_dir" clean package "$@"); then
  if ! (cd bindings/kotlin && mvn -B -q -o dependency:resolve >/dev/null 2>&1) &&
    ! (cd bindings/kotlin && mvn -B -q dependency:resolve >/dev/null 2>&1); then
    echo "MISSING: Maven could not download the Kotlin plugin or dependencies (no access to Maven Central?)" >&2
  fi
  exit 1
fi

jar=bindings/kotlin/target/wakemeter-kotlin-0.1.0.jar
listing="$(jar tf "$jar")"
for p in "${packed[@]}"; do
  if ! grep -qx "$p/libwakemeter_ffi.so" <<<"$listing"; then
    echo "kotlin: $jar lacks $p/libwakemeter_ffi.so" >&2
    exit 1
  fi
done

# The consumer resolves the jar from a throwaway repository; the copy
# Maven caches from there is removed first, so it is always this build's.
repo="$(mktemp -d)"
trap 'rm -rf "$repo"' EXIT
echo "==> jar-test: a program with the installed jar alone, no jna.library.path" >&2
(cd bindings/kotlin && mvn -B -ntp -q install:install-file -Dfile="target/wakemeter-kotlin-0.1.0.jar" \
  -DpomFile=pom.xml -DlocalRepositoryPath="$repo")
rm -rf "${HOME}/.m2/repository/dev/wakemeter/wakemeter-kotlin"
(cd bindings/kotlin/jar-test && env -u LD_LIBRARY_PATH mvn -B -ntp -Dwakemeter.repo="file://$repo" clean test)
echo "kotlin: ok: the jar carries ${packed[*]:-no native library} ($(du -k "$jar" | cut -f1) KiB)" >&2
