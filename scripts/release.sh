#!/usr/bin/env bash
# Gathers the release artefacts into one folder and checks that they carry
# one version: the Debian package, the Python wheel and the CLI tarball
# (the `redlock` binary with its man pages and shell completions), each named
# with VERSION, `redlock --version` saying VERSION; then writes SHA256SUMS
# and checks it.
#
#   scripts/release.sh OUT_DIR VERSION DEB WHEEL CLI_BIN DOCS_DIR
set -euo pipefail

[ $# -eq 6 ] || { echo "usage: $0 OUT_DIR VERSION DEB WHEEL CLI_BIN DOCS_DIR" >&2; exit 2; }
out=$1 version=$2 deb=$3 wheel=$4 cli=$5 docs=$6

fail() { echo "$0: $*" >&2; exit 1; }
for f in "$deb" "$wheel" "$cli"; do [ -f "$f" ] || fail "$f is missing"; done
[ -d "$docs/man" ] && [ -d "$docs/completions" ] || fail "$docs has no man/ and completions/ (make install-files writes them)"

# One version everywhere.
case "$(basename "$deb")" in redlock_"$version"_*.deb) ;; *) fail "the deb $(basename "$deb") is not version $version" ;; esac
case "$(basename "$wheel")" in redlock_fenced-"$version"-*.whl) ;; *) fail "the wheel $(basename "$wheel") is not version $version" ;; esac
deb_version=$(dpkg-deb -f "$deb" Version)
[ "$deb_version" = "$version" ] || fail "the deb's control says $deb_version, not $version"
wheel_version=$(python3 - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    print(next(l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Version:")))
PY
)
[ "$wheel_version" = "$version" ] || fail "the wheel's METADATA says $wheel_version, not $version"
cli_version=$("$cli" --version)
case "$cli_version" in *" $version"|*" $version "*) ;; *) fail "redlock --version says '$cli_version', not $version" ;; esac

arch=$(uname -m)
rm -rf "$out"
mkdir -p "$out"
cp "$deb" "$wheel" "$out/"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
name=redlock-$version-$arch-linux-gnu
install -D -m 755 "$cli" "$stage/$name/bin/redlock"
strip --strip-debug "$stage/$name/bin/redlock"
install -d "$stage/$name/share/man/man1" "$stage/$name/share/completions"
install -m 644 "$docs"/man/*.1 "$stage/$name/share/man/man1/"
install -m 644 "$docs"/completions/* "$stage/$name/share/completions/"
root=$(cd "$(dirname "$0")/.." && pwd)
install -m 644 "$root/README.md" "$root/CHANGELOG.md" "$stage/$name/"
tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"

cd "$out"
sha256sum -- *.deb *.whl *.tar.gz > SHA256SUMS
sha256sum --quiet -c SHA256SUMS
echo "release $version in $out:"
cat SHA256SUMS
