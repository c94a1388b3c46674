#!/bin/bash
# Build the Debian base tree (debootstrap minbase + packages.txt, trimmed) and
# cache it as a tarball keyed by the package list, the suite, the mirror and
# this script. Prints the tarball's path. A cache hit costs nothing.
set -euo pipefail
source "$(dirname "$0")/common.sh"

MIRROR=$(detect_mirror)
mapfile -t PACKAGES < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$ROOTFS_DIR/packages.txt" | tr -d '[:blank:]')
KEY=$( { printf '%s\n' "$SUITE" "$ARCH" "$MIRROR"; cat "$ROOTFS_DIR/packages.txt" "$0"; } | sha256sum | cut -c1-16)
TARBALL=$CACHE_DIR/base-$SUITE-$KEY.tar

if [ -f "$TARBALL" ]; then
	log "cached base tree: $TARBALL"
	echo "$TARBALL"
	exit 0
fi

mkdir -p "$CACHE_DIR"
WORK=$(mktemp -d "$CACHE_DIR/.base-XXXXXX")
ROOT=$WORK/root

# debootstrap mounts proc and sys inside the target; never rm -rf through a
# mount that is still there.
cleanup() {
	local m
	for m in $(awk -v r="$ROOT" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" || true
	done
	rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

log "debootstrap $SUITE ($ARCH, minbase) from $MIRROR"
debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
	{ tail -30 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }

# Keep this build and later apt installs inside the sandbox as lean as the
# image: no docs, man pages or translations, no recommends.
mkdir -p "$ROOT/etc/dpkg/dpkg.cfg.d" "$ROOT/etc/apt/apt.conf.d"
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/01-rayito-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
CFG
cat >"$ROOT/etc/apt/apt.conf.d/01-rayito" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
CFG

# apt resolves dependencies properly; debootstrap's --include does not.
log "installing: ${PACKAGES[*]}"
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod +x "$ROOT/usr/sbin/policy-rc.d"
mount -t proc proc "$ROOT/proc"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
	sh -c 'apt-get update -q && apt-get install -y -q "$@"' sh "${PACKAGES[@]}" >"$WORK/apt.log" 2>&1 ||
	{ tail -30 "$WORK/apt.log" >&2; die "apt-get install failed"; }
chroot "$ROOT" apt-get clean
umount "$ROOT/proc"
rm -f "$ROOT/usr/sbin/policy-rc.d"

log "trimming docs, man pages, locales, apt lists and caches"
find "$ROOT/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -rf "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/lintian/* \
	"$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
	"$ROOT"/var/cache/debconf/*-old "$ROOT"/var/lib/dpkg/*-old "$ROOT"/debootstrap
find "$ROOT/var/log" -type f -exec truncate -s 0 {} +
# A machine id baked into the image would be shared by every sandbox;
# systemd makes one at boot when the file is empty.
: >"$ROOT/etc/machine-id"
rm -f "$ROOT/var/lib/dbus/machine-id"

log "adding the unprivileged user"
chroot "$ROOT" /usr/sbin/useradd --create-home --shell /bin/bash --uid 1000 --user-group user

log "packing $TARBALL"
tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -cf "$TARBALL.tmp" .
mv "$TARBALL.tmp" "$TARBALL"
echo "$TARBALL"
