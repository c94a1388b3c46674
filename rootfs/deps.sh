#!/bin/bash
# Install the host packages the image build and the VM harness need, if missing.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# command -> Debian package that provides it
declare -A NEED=(
	[debootstrap]=debootstrap
	[qemu-system-x86_64]=qemu-system-x86
	[busybox]=busybox-static
	[mkfs.ext4]=e2fsprogs
	[cpio]=cpio
	[xz]=xz-utils
	[depmod]=kmod
	[qemu-img]=qemu-utils
)
missing=()
for cmd in "${!NEED[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
# A dynamic busybox cannot run inside the initramfs.
[ -f /bin/busybox ] && ldd /bin/busybox >/dev/null 2>&1 && missing+=(busybox-static)
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)

if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
	apt-get update
	apt-get install -y --no-install-recommends "${missing[@]}"
fi
