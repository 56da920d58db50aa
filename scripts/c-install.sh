#!/usr/bin/env bash
# Writes wakemeter.pc for the C API.
#   scripts/c-install.sh            build tree: target/pkgconfig/wakemeter.pc points at
#                                   target/<profile> and include/ (PROFILE=debug|release)
#   scripts/c-install.sh PREFIX     installs lib, headers and .pc under PREFIX (release build)
# Then: PKG_CONFIG_PATH=<dir of the .pc> cc app.c $(pkg-config --cflags --libs wakemeter)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
target_dir="${CARGO_TARGET_DIR:-$root/target}"

write_pc() { # prefix libdir includedir out
  mkdir -p "$(dirname "$4")"
  sed -e "s|@PREFIX@|$1|" -e "s|@LIBDIR@|$2|" -e "s|@INCLUDEDIR@|$3|" -e "s|@VERSION@|$version|" \
    crates/capi/wakemeter.pc.in >"$4"
  echo "wrote $4"
}

if [ $# -eq 0 ]; then
  profile="${PROFILE:-debug}"
  write_pc "$root" "$target_dir/$profile" "$root/include" "$target_dir/pkgconfig/wakemeter.pc"
else
  prefix="$1"
  cargo build --release -p wakemeter-capi
  install -d "$prefix/lib/pkgconfig" "$prefix/include"
  install -m 0644 "$target_dir/release/libwakemeter.a" "$prefix/lib/"
  install -m 0755 "$target_dir/release/libwakemeter.so" "$prefix/lib/"
  install -m 0644 include/wakemeter.h include/wakemeter_libevent.h "$prefix/include/"
  install -m 0644 crates/capi/c/wakemeter_libevent.c "$prefix/include/"
  write_pc "$prefix" "$prefix/lib" "$prefix/include" "$prefix/lib/pkgconfig/wakemeter.pc"
fi
