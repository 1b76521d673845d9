#!/bin/sh
# pkgconfig.sh INSTALLED_PREFIX LIBDIR VERSION consumer.c WORKDIR CC PKG_CONFIG
# Builds consumer.c against the installed hakmem with only what pkg-config
# says (as `cc app.c $(pkg-config --cflags --libs hakmem)`) and runs it.
set -eu
prefix=$1 libdir=$2 version=$3 source=$4 work=$5 cc=$6 pkg_config=$7
[ -n "$pkg_config" ] || { echo "FAIL: no pkg-config (scripts/deps.sh installs it)"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR

got=$("$pkg_config" --modversion hakmem)
[ "$got" = "$version" ] || { echo "FAIL: pkg-config --modversion hakmem: '$got', expected $version"; exit 1; }
cflags=$("$pkg_config" --cflags hakmem)
libs=$("$pkg_config" --libs hakmem)
echo "cflags: $cflags"
echo "libs:   $libs"
# shellcheck disable=SC2086
"$cc" -Wall -Wextra -Werror $cflags "$source" -o "$work/consumer" $libs

# Linked against the soname, and that resolves to the installed library.
readelf -d "$work/consumer" | grep -q "NEEDED.*\[libhakmem\.so\.${version%%.*}\]" ||
  { echo "FAIL: consumer does not need libhakmem.so.${version%%.*}"; readelf -d "$work/consumer"; exit 1; }
resolved=$(LD_LIBRARY_PATH="$prefix/$libdir" ldd "$work/consumer" | grep libhakmem)
case $resolved in
  *"$prefix/$libdir/libhakmem.so"*) echo "resolved: $resolved" ;;
  *) echo "FAIL: libhakmem resolves to: $resolved"; exit 1 ;;
esac
LD_LIBRARY_PATH="$prefix/$libdir" "$work/consumer"
