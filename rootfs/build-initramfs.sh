#!/bin/bash
# Build the initramfs for a kernel tree unpacked by get-kernel.sh:
#   build-initramfs.sh KERNEL_TREE OUTPUT
# busybox-static, the modules in initramfs/modules with their dependencies,
# and initramfs/init. Deterministic for the same inputs.
set -euo pipefail
source "$(dirname "$0")/common.sh"

KTREE=${1:?kernel tree}
OUT=${2:?output file}
KVER=$(ls "$KTREE/lib/modules")
BUSYBOX=${BUSYBOX:-/bin/busybox}
ldd "$BUSYBOX" >/dev/null 2>&1 && die "$BUSYBOX is not static (install busybox-static)"

R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/{bin,sbin,dev,proc,sys,etc,newroot} "$R/lib/modules/$KVER"
cp "$BUSYBOX" "$R/bin/busybox"
for a in sh cat mount umount mkdir sleep switch_root modprobe insmod; do
	ln -s busybox "$R/bin/$a"
done
# The kernel runs /sbin/modprobe to load modules on demand (crypto, fs).
ln -s ../bin/busybox "$R/sbin/modprobe"

# The closure of the wanted modules over the kernel's modules.dep.
DEP=$KTREE/lib/modules/$KVER/modules.dep
mapfile -t WANT < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$ROOTFS_DIR/initramfs/modules")
mapfile -t FILES < <(awk -v want="${WANT[*]}" '
	BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) { gsub(/-/, "_", w[i]); wanted[w[i]] = 1 } }
	{
		sub(/:$/, "", $1); name = $1; sub(/.*\//, "", name); sub(/\.ko.*$/, "", name); gsub(/-/, "_", name)
		if (name in wanted) { print $1; for (i = 2; i <= NF; i++) print $i }
	}' "$DEP" | sort -u)
for want in "${WANT[@]}"; do
	printf '%s\n' "${FILES[@]}" | grep -q "/${want//_/[_-]}\.ko" || die "module $want not in $KVER"
done
for f in "${FILES[@]}"; do
	mkdir -p "$R/lib/modules/$KVER/$(dirname "$f")"
	cp "$KTREE/lib/modules/$KVER/$f" "$R/lib/modules/$KVER/$f"
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
	cp "$KTREE/lib/modules/$KVER/$f" "$R/lib/modules/$KVER/" 2>/dev/null || true
done
depmod -b "$R" "$KVER"
printf '%s\n' "${WANT[@]}" >"$R/etc/modules"
install -m 0755 "$ROOTFS_DIR/initramfs/init" "$R/init"
[ "$(id -u)" = 0 ] && mknod -m 0600 "$R/dev/console" c 5 1

find "$R" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$(dirname "$OUT")"
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --reproducible --quiet | gzip -n -9) >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
log "initramfs for $KVER: $OUT ($(du -h "$OUT" | cut -f1), ${#FILES[@]} modules)"
