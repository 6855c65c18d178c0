#!/usr/bin/env bash
# Build the Debian binary package libnginx-mod-http-srt (debian/, dpkg-buildpackage) into
# build/deb/, then run lintian on it when lintian is installed.
#
# The package depends on the nginx-abi-* virtual package of the nginx it was built against
# (dh_nginx reads it from nginx-dev), so apt refuses it next to any other nginx.
# Install it with:  apt install ./build/deb/libnginx-mod-http-srt_*.deb
#
#   SRT_DEB_CUDA=1   include the CUDA plugin (needs nvcc; see debian/rules)
# Build dependencies missing from the machine are installed with apt-get (root or sudo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "build-deb: $*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root (or sudo) to run: $*"; fi
}

deps=(build-essential dpkg-dev debhelper nginx-dev libyajl-dev libpcre2-dev)
installed=" $({ dpkg-query -W -f='${Package} ${Status}\n' "${deps[@]}" 2>/dev/null || true; } |
              awk '$4 == "installed" { printf "%s ", $1 }')"
missing=()
for p in "${deps[@]}"; do
    case "$installed" in *" $p "*) ;; *) missing+=("$p") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build-deb: apt: installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
        die "apt-get update failed (no network to the Debian mirror?)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        die "cannot install the build dependencies ${missing[*]}"
fi

version=$(dpkg-parsechangelog -S Version)
arch=$(dpkg --print-architecture)
out=build/deb
rm -rf "$out" && mkdir -p "$out"
# .changes and .buildinfo beside the .deb in build/deb, not in the clone's parent directory
dpkg-buildpackage -b -uc -us \
    --buildinfo-option=-u"$out" --buildinfo-file="$out/ngx-srt_${version}_$arch.buildinfo" \
    --changes-option=-u"$out" --changes-file="$out/ngx-srt_${version}_$arch.changes" \
    > "$out/build.log" 2>&1 || { tail -30 "$out/build.log" >&2; die "dpkg-buildpackage failed (log: $out/build.log)"; }
deb=$(ls "$out"/libnginx-mod-http-srt_*.deb)
echo "build-deb: $deb"
dpkg-deb -f "$deb" Depends | sed 's/^/build-deb: Depends: /'
if command -v lintian >/dev/null; then
    # debian/libnginx-mod-http-srt.lintian-overrides explains each tag left
    lintian --info "$deb" || die "lintian found errors in $deb"
fi
