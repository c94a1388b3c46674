#!/bin/bash
# Fetch Debian's kernel (linux-image-amd64's current flavour, or
# KERNEL_PKG=name[=version]) without installing it: apt-get download, then
# dpkg-deb -x into the cache. Prints the unpacked tree's path. Also writes
# boot/vmlinux there, the uncompressed ELF kernel that Firecracker loads.
set -euo pipefail
source "$(dirname "$0")/common.sh"

resolve_pkg() {
	apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
PKG=${KERNEL_PKG:-}
if [ -z "$PKG" ]; then
	PKG=$(resolve_pkg)
	if [ -z "$PKG" ]; then apt-get update >&2; PKG=$(resolve_pkg); fi
	[ -n "$PKG" ] || die "cannot resolve linux-image-amd64"
fi
NAME=${PKG%%=*}
VERSION=$(apt-cache show --no-all-versions "$PKG" 2>/dev/null | awk '/^Version:/ { print $2; exit }')
[ -n "$VERSION" ] || { apt-get update >&2; VERSION=$(apt-cache show --no-all-versions "$PKG" | awk '/^Version:/ { print $2; exit }'); }
DIR=$CACHE_DIR/kernel/${NAME}_$VERSION
if [ -f "$DIR/.complete" ]; then
	echo "$DIR"
	exit 0
fi

mkdir -p "$CACHE_DIR/kernel"
WORK=$(mktemp -d "$CACHE_DIR/kernel/.dl-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# apt drops privileges to _apt for downloads; let it write here.
chown _apt "$WORK" 2>/dev/null || true
log "downloading $NAME $VERSION"
(cd "$WORK" && apt-get download -q "$NAME=$VERSION" >&2)
rm -rf "$DIR"
mkdir -p "$DIR"
dpkg-deb -x "$WORK"/"${NAME}"_*.deb "$DIR"
KVER=$(ls "$DIR/lib/modules")
# The package leaves modules.dep to its postinst; make it here.
depmod -b "$DIR" "$KVER"

# bzImage payload -> ELF: find the xz stream the setup code decompresses.
VMLINUZ=$DIR/boot/vmlinuz-$KVER
off=$(LC_ALL=C grep -aboP '\xFD7zXZ' "$VMLINUZ" | head -1 | cut -d: -f1 || true)
if [ -n "$off" ]; then
	tail -c +$((off + 1)) "$VMLINUZ" | xz -dc 2>/dev/null >"$DIR/boot/vmlinux" || true
fi
if ! head -c 4 "$DIR/boot/vmlinux" 2>/dev/null | grep -q 'ELF'; then
	log "warning: could not extract an ELF vmlinux (Firecracker needs one)"
	rm -f "$DIR/boot/vmlinux"
fi
touch "$DIR/.complete"
echo "$DIR"
