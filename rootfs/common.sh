# Shared settings and helpers for the rootfs scripts; sourced, not run.
# Every setting can be overridden from the environment.

ROOTFS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$ROOTFS_DIR/.." && pwd)
CACHE_DIR=${CACHE_DIR:-/var/cache/rayito-rootfs}
OUT_DIR=${OUT_DIR:-$REPO_DIR/build}
SUITE=${SUITE:-bookworm}
ARCH=${ARCH:-amd64}
# Fixed so that files we add get the same timestamps on every build.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# detect_mirror prints the Debian mirror apt uses for $SUITE (one-line
# sources.list or deb822 .sources), so debootstrap reads the same archive.
detect_mirror() {
	if [ -n "${MIRROR:-}" ]; then echo "$MIRROR"; return; fi
	local m
	m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk -v s="$SUITE" '$1=="deb" { sub(/\[[^]]*\]/, ""); $0=$0; if ($3==s) { print $2; exit } }')
	if [ -z "$m" ]; then
		m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
			awk -v s="$SUITE" 'BEGIN { RS=""; FS="\n" }
				{ uri=""; ok=0
				  for (i=1; i<=NF; i++) {
				    if ($i ~ /^URIs:/) { split($i, u, /[ \t]+/); uri=u[2] }
				    if ($i ~ /^Suites:/) { n=split($i, w, /[ \t]+/); for (j=2; j<=n; j++) if (w[j]==s) ok=1 }
				  }
				  if (ok && uri != "") { print uri; exit } }')
	fi
	echo "${m:-http://deb.debian.org/debian}"
}

# go_build_static builds a static Go binary from a package of this module,
# without net/http's HTTP/2 (the Makefile's TAGS says why).
go_build_static() {
	local pkg=$1 out=$2
	(cd "$REPO_DIR" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
		go build -trimpath -buildvcs=false -tags nethttpomithttp2 -ldflags='-s -w' -o "$out" "$pkg")
}
