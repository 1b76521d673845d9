#!/bin/sh
# pkgconfig.sh INSTALLED_PREFIX LIBDIR VERSION consumer.c WORKDIR CC PKG_CONFIG
# For each variant (hakmem, hakmem-secure): builds consumer.c against the
# installed library with only what pkg-config says (as
# `cc app.c $(pkg-config --cflags --libs hakmem)`) and runs it.
set -eu
prefix=$1 libdir=$2 version=$3 source=$4 work=$5 cc=$6 pkg_config=$7
[ -n "$pkg_config" ] || { echo "FAIL: no pkg-config (scripts/deps.sh installs it)"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR

for module in hakmem hakmem-secure; do
  echo "== $module"
  got=$("$pkg_config" --modversion "$module")
  [ "$got" = "$version" ] || { echo "FAIL: pkg-config --modversion $module: '$got', expected $version"; exit 1; }
  cflags=$("$pkg_config" --cflags "$module")
  libs=$("$pkg_config" --libs "$module")
  echo "cflags: $cflags"
  echo "libs:   $libs"
  # shellcheck disable=SC2086
  "$cc" -Wall -Wextra -Werror $cflags "$source" -o "$work/$module" $libs

  # Linked against the variant's soname, and that resolves to the installed library.
  readelf -d "$work/$module" | grep -q "NEEDED.*\[lib$module\.so\.${version%%.*}\]" ||
    { echo "FAIL: $module's consumer does not need lib$module.so.${version%%.*}"; readelf -d "$work/$module"; exit 1; }
  resolved=$(LD_LIBRARY_PATH="$prefix/$libdir" ldd "$work/$module" | grep "lib$module\.so")
  case $resolved in
    *"$prefix/$libdir/lib$module.so"*) echo "resolved: $resolved" ;;
    *) echo "FAIL: lib$module resolves to: $resolved"; exit 1 ;;
  esac
  LD_LIBRARY_PATH="$prefix/$libdir" "$work/$module"
done
