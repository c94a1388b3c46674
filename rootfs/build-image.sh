#!/bin/bash
# Build the MicroVM root filesystem image and its boot files:
#   AGENT=path/to/rayito-agent rootfs/build-image.sh
# Outputs (OUT_DIR, default build/):
#   rootfs.ext4          the root filesystem (IMAGE=path to put it elsewhere)
#   vmlinuz, vmlinux     Debian's kernel (bzImage for QEMU, ELF for Firecracker)
#   initramfs.cpio.gz    loads the virtio and ext4 modules, mounts the root
# The Debian tree and the kernel are cached in CACHE_DIR
# (/var/cache/rayito-rootfs): a rebuild only re-copies the agent and init.
# Same inputs give the same files: the initramfs is byte-identical, the
# ext4 image is not (mkfs.ext4 -d copies inode change times).
# Settings: INIT (prebuilt rayito-init, else built here), IMAGE_FREE_MB (free
# space in the image, default 512), KERNEL_PKG, MIRROR, SUITE.
set -euo pipefail
source "$(dirname "$0")/common.sh"

AGENT=${AGENT:?set AGENT to the rayito-agent binary to install}
[ -x "$AGENT" ] || die "AGENT=$AGENT is not an executable file"
IMAGE=${IMAGE:-$OUT_DIR/rootfs.ext4}
IMAGE_FREE_MB=${IMAGE_FREE_MB:-512}
# Fixed identifiers so that the same inputs give the same filesystem.
FS_UUID=${FS_UUID:-5a7c1e00-0000-4000-8000-726179697430}
HASH_SEED=${HASH_SEED:-5a7c1e00-0000-4000-8000-686173680000}
t0=$(date +%s)

"$ROOTFS_DIR/deps.sh"
mkdir -p "$OUT_DIR" "$(dirname "$IMAGE")" "$CACHE_DIR"
# One build at a time per cache: they share the kernel tree and outputs.
exec 9>"$CACHE_DIR/.lock"
flock 9
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/rayito-rootfs-XXXXXX")
trap 'rm -rf --one-file-system "$STAGE"' EXIT

INIT_BIN=${INIT:-}
if [ -z "$INIT_BIN" ]; then
	INIT_BIN=$STAGE/rayito-init
	go_build_static ./rootfs/init "$INIT_BIN"
fi

BASE=$("$ROOTFS_DIR/build-base.sh")
KTREE=$("$ROOTFS_DIR/get-kernel.sh")
KVER=$(ls "$KTREE/lib/modules")
"$ROOTFS_DIR/build-initramfs.sh" "$KTREE" "$OUT_DIR/initramfs.cpio.gz"
install -m 0644 "$KTREE/boot/vmlinuz-$KVER" "$OUT_DIR/vmlinuz"
[ -f "$KTREE/boot/vmlinux" ] && install -m 0644 "$KTREE/boot/vmlinux" "$OUT_DIR/vmlinux"
echo "$KVER" >"$OUT_DIR/kernel.release"

log "assembling the tree from $(basename "$BASE")"
R=$STAGE/root
mkdir -p "$R"
tar -C "$R" --numeric-owner --xattrs --xattrs-include='*' -xf "$BASE"
cp -r "$ROOTFS_DIR/overlay/." "$R/"
install -m 0755 "$AGENT" "$R/usr/local/bin/rayito-agent"
install -m 0755 "$INIT_BIN" "$R/usr/sbin/rayito-init"
# /sbin/init is ours unless the tree has another init (systemd-sysv).
[ -e "$R/usr/sbin/init" ] || ln -s rayito-init "$R/usr/sbin/init"
install -d -m 0700 "$R/var/lib/rayito-agent"

# systemd integration, for booting with init=/lib/systemd/systemd.
SD=$R/etc/systemd/system
install -m 0644 "$ROOTFS_DIR/rayito-agent.service" "$ROOTFS_DIR/rayito-net.service" "$SD/"
mkdir -p "$SD/multi-user.target.wants"
ln -sf ../rayito-agent.service "$SD/multi-user.target.wants/rayito-agent.service"
ln -sf ../rayito-net.service "$SD/multi-user.target.wants/rayito-net.service"
# No login prompts on the console (the agent is the way in), and no
# housekeeping timers waking up inside a sandbox.
for unit in getty.target apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
	e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
	ln -sf /dev/null "$SD/$unit"
done

cat >"$R/etc/rayito-image" <<INFO
base=$(basename "$BASE")
kernel=$KVER
agent_sha256=$(sha256sum "$AGENT" | cut -d' ' -f1)
init_sha256=$(sha256sum "$INIT_BIN" | cut -d' ' -f1)
INFO
chown -R 0:0 "$R/etc/rayito-image" "$R/etc/hostname" "$R/etc/hosts" "$R/etc/resolv.conf" "$R/etc/rayito-agent.env" "$SD"
find "$R/etc" "$R/usr/local/bin" "$R/usr/sbin/rayito-init" "$R/usr/sbin/init" "$R/var/lib/rayito-agent" \
	-newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

used_mb=$(du -sm --apparent-size "$R" | cut -f1)
size_mb=$((used_mb + used_mb / 5 + 64 + IMAGE_FREE_MB))
rm -f "$IMAGE.tmp"
# orphan_file needs Linux 5.15+; leave it out so 5.10 guest kernels
# (Firecracker's older recommended ones) can mount the image read-write.
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -L rayito-root -U "$FS_UUID" \
	-E "hash_seed=$HASH_SEED,root_owner=0:0" -O ^orphan_file -i 8192 -m 0 \
	-d "$R" "$IMAGE.tmp" "${size_mb}M" >/dev/null
mv "$IMAGE.tmp" "$IMAGE"
log "image $IMAGE: ${size_mb} MiB (${used_mb} MiB of files), kernel $KVER, $(($(date +%s) - t0)) s"
