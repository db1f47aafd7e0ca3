#!/usr/bin/env bash
# Turns a tree staged by `make install-files DESTDIR=ROOT PREFIX=/usr
# CONF=/etc/redis/redlock.conf …` into a Debian package with dpkg-deb:
# compressed man pages, the copyright and changelog, DEBIAN/control with the
# dependencies read from the binaries, DEBIAN/conffiles, DEBIAN/md5sums.
#
#   packaging/deb.sh ROOT VERSION OUT_DIR [dpkg-deb options, e.g. -Zgzip]
#
# Writes OUT_DIR/redlock_VERSION_ARCH.deb and prints its path.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 ROOT VERSION OUT_DIR [dpkg-deb options]" >&2; exit 2; }
root=$1
version=$2
out_dir=$3
shift 3
case "$version" in
  [0-9]*) ;;
  *) echo "$0: '$version' is not a version (it comes from [workspace.package] in Cargo.toml)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
conffile=/etc/redis/redlock.conf
module=usr/lib/redis/modules/libredlock.so
cli=usr/bin/redlock

for f in "$module" "$cli" "${conffile#/}"; do
  [ -f "$root/$f" ] || { echo "$0: $root/$f is missing: stage the tree first (make deb)" >&2; exit 1; }
done
command -v dpkg-deb >/dev/null || { echo "$0: dpkg-deb is missing (apt-get install dpkg)" >&2; exit 1; }

# Debian keeps man pages and changelogs compressed (-n: no timestamp inside).
find "$root/usr/share/man" -type f -name '*.1' -exec gzip -9nf {} +
doc="$root/usr/share/doc/redlock"
install -d "$doc"
gzip -9nc "$here/../CHANGELOG.md" > "$doc/changelog.gz"
cat > "$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: redlock

Files: *
Copyright: the redlock authors
License: MIT
COPYRIGHT

# Dependencies: every shared library the binaries link must map to a
# package below, or the build stops (a new library needs a new line here).
needed=$(for f in "$module" "$cli"; do
  LC_ALL=C readelf -d "$root/$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
done | sort -u)
packages=()
for lib in $needed; do
  case "$lib" in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.*) packages+=(libc6) ;;
    libgcc_s.so.1) packages+=(libgcc-s1) ;;
    *) echo "$0: no package known for the shared library $lib" >&2; exit 1 ;;
  esac
done
# The newest glibc symbol version the binaries use is the floor for libc6.
glibc=$(for f in "$module" "$cli"; do
  LC_ALL=C objdump -T "$root/$f"
done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
depends=""
for p in $(printf '%s\n' "${packages[@]}" | sort -u); do
  case "$p" in
    libc6) entry="libc6 (>= $glibc)" ;;
    *) entry=$p ;;
  esac
  depends="${depends:+$depends, }$entry"
done

arch=$(dpkg --print-architecture)
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
install -d "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<CONTROL
Package: redlock
Version: $version
Architecture: $arch
Maintainer: redlock maintainers <maintainers@users.noreply.a-seed-65c6d978.example>
Installed-Size: $size
Depends: $depends
Recommends: redis-server (>= 5:7.0)
Section: database
Priority: optional
Description: fenced distributed locks for Redis (module and CLI)
 The redlock Redis module gives every Redis 7.0+ master atomic lock
 commands with per-key fencing tokens (REDLOCK.ACQUIRE, RELEASE, EXTEND,
 FENCE, INSPECT, WAIT). The redlock command runs the Redlock quorum over
 several such masters from the shell: acquire, release, inspect, and run a
 command while holding a lock.
 .
 To load the module, add this line to /etc/redis/redis.conf and restart
 Redis:
 .
   include $conffile
CONTROL
echo "$conffile" > "$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort \
  | xargs md5sum > DEBIAN/md5sums)

mkdir -p "$out_dir"
deb="$out_dir/redlock_${version}_${arch}.deb"
dpkg-deb --root-owner-group "$@" --build "$root" "$deb" >/dev/null
echo "$deb"
