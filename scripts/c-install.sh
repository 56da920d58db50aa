#!/usr/bin/env bash
# Writes wakemeter.pc for the C API.
#   scripts/c-install.sh            build tree: target/pkgconfig/wakemeter.pc points at
#                                   target/<profile> and include/ (PROFILE=debug|release)
#   scripts/c-install.sh PREFIX     installs lib, headers and .pc under PREFIX (release build,
#                                   PROFILE=debug for the debug one); DESTDIR=dir stages the
#                                   files under dir, with PREFIX's paths inside them
# Then: PKG_CONFIG_PATH=<dir of the .pc> cc app.c $(pkg-config --cflags --libs wakemeter)
#
# The shared library is installed under versioned names, as C libraries
# are (crates/capi/build.rs sets the SONAME): Linux libwakemeter.so.X.Y.Z,
# with the links libwakemeter.so.SOVER (what programs load) and
# libwakemeter.so (what -lwakemeter finds); macOS libwakemeter.SOVER.dylib
# and libwakemeter.dylib. SOVER is the major version, or 0.MINOR while the
# version is 0.x. On Linux ldconfig then refreshes the loader's cache, when
# that is this script's job: as root, without DESTDIR (a package's own
# install step runs it), and for a lib directory the loader searches
# (/usr/local/lib...). Elsewhere it says why it skipped it; programs then
# find the library by -Wl,-rpath,PREFIX/lib or LD_LIBRARY_PATH.
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

# Whether ldconfig ($1) scans directory $2 (compared as canonical paths:
# with a merged /usr it lists /lib for /usr/lib).
loader_searches() {
  local want dir
  want=$(readlink -f "$2")
  while read -r dir; do
    [ "$(readlink -f "$dir")" = "$want" ] && return 0
  done < <("$1" -v -N 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p')
  return 1
}

# The ldconfig step: run it, or say why not.
refresh_loader_cache() { # libdir
  local ldconfig
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  if [ -n "${DESTDIR:-}" ]; then
    echo "ldconfig: skipped (DESTDIR is set: the package's own install step runs it)"
  elif [ "$(id -u)" != 0 ]; then
    echo "ldconfig: skipped (not root); run it as root if $1 is a system library directory"
  elif [ ! -x "$ldconfig" ]; then
    echo "ldconfig: skipped (not found)"
  elif ! loader_searches "$ldconfig" "$1"; then
    echo "ldconfig: skipped ($1 is not a directory the loader searches; link with -Wl,-rpath,$1 or set LD_LIBRARY_PATH)"
  else
    "$ldconfig"
    echo "ldconfig: loader cache refreshed"
  fi
}

if [ $# -eq 0 ]; then
  profile="${PROFILE:-debug}"
  write_pc "$root" "$target_dir/$profile" "$root/include" "$target_dir/pkgconfig/wakemeter.pc"
else
  prefix="${1%/}"
  profile="${PROFILE:-release}"
  major=${version%%.*}
  minor=${version#*.}
  minor=${minor%%.*}
  if [ "$major" = 0 ]; then sover="0.$minor"; else sover="$major"; fi
  if [ "$profile" = release ]; then
    cargo build --release -p wakemeter-capi
  else
    cargo build -p wakemeter-capi
  fi
  built="$target_dir/$profile"
  libdir="$prefix/lib"
  dest="${DESTDIR:-}"
  install -d "$dest$libdir/pkgconfig" "$dest$prefix/include"
  install -m 0644 "$built/libwakemeter.a" "$dest$libdir/"
  case "$(uname -s)" in
    Darwin)
      install -m 0755 "$built/libwakemeter.dylib" "$dest$libdir/libwakemeter.$sover.dylib"
      install_name_tool -id "$libdir/libwakemeter.$sover.dylib" "$dest$libdir/libwakemeter.$sover.dylib"
      ln -sfn "libwakemeter.$sover.dylib" "$dest$libdir/libwakemeter.dylib"
      ;;
    *)
      install -m 0755 "$built/libwakemeter.so" "$dest$libdir/libwakemeter.so.$version"
      ln -sfn "libwakemeter.so.$version" "$dest$libdir/libwakemeter.so.$sover"
      ln -sfn "libwakemeter.so.$sover" "$dest$libdir/libwakemeter.so"
      refresh_loader_cache "$libdir"
      ;;
  esac
  install -m 0644 include/wakemeter.h include/wakemeter_libevent.h "$dest$prefix/include/"
  install -m 0644 crates/capi/c/wakemeter_libevent.c "$dest$prefix/include/"
  write_pc "$prefix" "$libdir" "$prefix/include" "$dest$libdir/pkgconfig/wakemeter.pc"
fi
