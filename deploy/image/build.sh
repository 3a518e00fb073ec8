#!/usr/bin/env bash
# Builds the Switchyard controller image as an OCI image layout and an
# oci-archive tarball, without a container engine (docs/image.md):
#
#   deploy/image/build.sh OUT_DIR [VERSION]      (make image: ./_out/image)
#
# 1. A Debian bookworm root filesystem from Debian's own packages
#    (mmdebstrap --variant=essential plus packages.txt), cached as a tarball
#    in ~/.cache/switchyard/image/ under a hash of the exact mmdebstrap
#    command (suite, mirrors, packages, options), so a second build does not
#    download anything. SWITCHYARD_IMAGE_REFRESH=1 rebuilds it (to take
#    Debian's security updates); DEBIAN_SNAPSHOT=20261120T000000Z builds from
#    snapshot.debian.org at that time instead of deb.debian.org (untested:
#    that host does not resolve on the project's machines).
# 2. The static switchyard binary (CGO_ENABLED=0, -trimpath) in
#    /usr/local/bin, the Lua shim in /usr/share/switchyard/lua, user and group
#    switchyard (10001) with home /var/lib/switchyard, no setuid or setgid
#    file, and the file capability cap_net_bind_service on the binary and on
#    /usr/sbin/nginx.
# 3. One layer tar (GNU tar, keeping the security.capability xattr as a PAX
#    record), added to an OCI layout with umoci, then the image config:
#    user 10001:10001, entrypoint /usr/local/bin/switchyard, cmd controller.
#
# Writes OUT_DIR/oci (the layout, tag VERSION) and
# OUT_DIR/switchyard-VERSION.oci.tar (the same layout as one tar:
# `skopeo copy oci-archive:...`, `podman load -i`, `docker load -i`).
# Needs root (the root filesystem keeps its owners and the capability),
# mmdebstrap, umoci, setcap and Go. deploy/Dockerfile builds the same image
# with a container engine; keep the two in sync (test/image checks it).
set -euo pipefail

usage() { echo "usage: $0 OUT_DIR [VERSION]" >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
version=${2:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)}
case $version in
	'' | *[!A-Za-z0-9_.-]* | [.-]*) echo "build.sh: version $version: want [A-Za-z0-9_.-]+ (an OCI tag)" >&2; exit 2 ;;
esac

for tool in mmdebstrap umoci setcap getcap tar gzip flock sha256sum "${GO:-go}"; do
	command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (test/setup.sh installs it)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build.sh: run as root: the root filesystem keeps its owners and file capabilities" >&2; exit 1; }

# Timestamps in the layer and the config: the commit's time unless
# SOURCE_DATE_EPOCH is set, so rebuilding a commit gives the same layer.
: "${SOURCE_DATE_EPOCH:=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

# --- 1. The Debian root filesystem, cached -----------------------------------
suite=bookworm
if [ -n "${DEBIAN_SNAPSHOT:-}" ]; then
	case $DEBIAN_SNAPSHOT in *[!0-9TZ]*) echo "build.sh: DEBIAN_SNAPSHOT=$DEBIAN_SNAPSHOT: want 20261120T000000Z" >&2; exit 2 ;; esac
	mirrors=("deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT $suite main"
		"deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT $suite-updates main"
		"deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/$DEBIAN_SNAPSHOT $suite-security main")
else
	mirrors=("deb http://deb.debian.org/debian $suite main"
		"deb http://deb.debian.org/debian $suite-updates main"
		"deb http://deb.debian.org/debian-security $suite-security main")
fi
packages=$(grep -v -e '^#' -e '^[[:space:]]*$' "$here/packages.txt" | sort -u | paste -sd, -)
[ -n "$packages" ] || { echo "build.sh: no packages in $here/packages.txt" >&2; exit 1; }
# Everything that decides the root filesystem's content is on this command
# line, and the cache key is its hash. The hooks set up merged /usr without
# the usrmerge package (which pulls in perl), drop the host's resolv.conf and
# hostname (a runtime provides them) and the logs of the installation.
# shellcheck disable=SC2016 # the hooks' "$1" is mmdebstrap's, not ours
mmdebstrap_args=(
	--variant=essential
	--include="$packages"
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
	--skip=output/dev
	--dpkgopt='path-exclude=/usr/share/man/*'
	--dpkgopt='path-exclude=/usr/share/info/*'
	--dpkgopt='path-exclude=/usr/share/locale/*'
	--dpkgopt='path-exclude=/usr/share/doc/*'
	--dpkgopt='path-include=/usr/share/doc/*/copyright'
	--customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"'
	--customize-hook='rm -rf "$1"/var/log/apt "$1"/var/log/*.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old'
	"$suite"
)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/image
mkdir -p "$cache"
key=$(printf '%s\n' "${mmdebstrap_args[@]}" "${mirrors[@]}" | sha256sum | cut -c1-16)
rootfs_tar=$cache/debian-$suite-$key.tar
{
	# One build at a time fills the cache (make image and test/image may
	# run together).
	flock 9
	if [ -n "${SWITCHYARD_IMAGE_REFRESH:-}" ] || [ ! -s "$rootfs_tar" ]; then
		echo "build.sh: building the Debian root filesystem ($packages) into $rootfs_tar"
		start=$(date +%s)
		rm -rf "$rootfs_tar.tmp"
		if ! mmdebstrap --format=tar "${mmdebstrap_args[@]}" "$rootfs_tar.tmp" "${mirrors[@]}" >"$cache/mmdebstrap.log" 2>&1; then
			rm -rf "$rootfs_tar.tmp"
			tail -n 40 "$cache/mmdebstrap.log" >&2
			echo "build.sh: mmdebstrap failed; its whole output is in $cache/mmdebstrap.log" >&2
			exit 1
		fi
		mv "$rootfs_tar.tmp" "$rootfs_tar"
		echo "build.sh: Debian root filesystem built in $(($(date +%s) - start)) s"
	else
		echo "build.sh: Debian root filesystem from the cache: $rootfs_tar"
	fi
} 9>"$cache/.lock"

# --- 2. The image's files -----------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir "$root"
tar --extract --file "$rootfs_tar" --directory "$root" --numeric-owner --same-permissions
# An empty /dev, as in Debian's own images: the runtime mounts its own there.
install -d -m 0755 -o 0 -g 0 "$root/dev"

echo "build.sh: building switchyard $version"
# With the runtime overlay (deploy/goruntime/overlay.sh): the poller runs
# ready connections in the order they came, and an idle P keeps looking for
# work a while before it sleeps.
overlay=$(GO="${GO:-go}" "$repo/deploy/goruntime/overlay.sh" "$work/goruntime")
(cd "$repo" && CGO_ENABLED=0 "${GO:-go}" build -trimpath ${overlay:+-overlay="$overlay"} -ldflags "-s -w -X main.version=$version" -o "$work/switchyard" ./cmd/switchyard)
install -D -m 0755 -o 0 -g 0 "$work/switchyard" "$root/usr/local/bin/switchyard"

# The Lua shim: the .lua files only (lua/ also holds its Go tests).
lua=$root/usr/share/switchyard/lua
install -d -m 0755 "$lua/switchyard"
install -m 0644 -o 0 -g 0 "$repo"/lua/*.lua "$lua/"
install -m 0644 -o 0 -g 0 "$repo"/lua/switchyard/*.lua "$lua/switchyard/"

# User and group switchyard, 10001, as `useradd --system --uid 10001` would
# write them (the essential variant has no useradd).
grep -q '^switchyard:' "$root/etc/passwd" && { echo "build.sh: a switchyard user exists already" >&2; exit 1; }
echo 'switchyard:x:10001:10001:Switchyard:/var/lib/switchyard:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'switchyard:x:10001:' >>"$root/etc/group"
echo 'switchyard:!:::::::' >>"$root/etc/shadow"
echo 'switchyard:!::' >>"$root/etc/gshadow"
# Home; --nginx-dir defaults to /var/lib/switchyard/nginx.
install -d -m 0755 -o 10001 -g 10001 "$root/var/lib/switchyard" "$root/var/lib/switchyard/nginx"

# No setuid or setgid files (Debian's essential set has su, newgrp and
# unix_chkpwd): the DaemonSet must allow privilege escalation for the file
# capabilities below, so the image offers no other way up.
find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +

# Binding 80 and 443 as uid 10001: the DaemonSet adds only NET_BIND_SERVICE
# to the bounding set; these file capabilities raise it at exec.
setcap cap_net_bind_service=+ep "$root/usr/local/bin/switchyard"
setcap cap_net_bind_service=+ep "$root/usr/sbin/nginx"
getcap "$root/usr/local/bin/switchyard" "$root/usr/sbin/nginx"

# --- 3. The OCI image ---------------------------------------------------------
layer=$work/layer.tar
# Entries without "./", sorted, numeric owners, mtimes clamped; of the
# extended attributes only security.capability is kept.
mapfile -t top < <(cd "$root" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort)
(cd "$root" && tar --create --file "$layer" --format=pax --sort=name --numeric-owner \
	--xattrs --xattrs-include='security.capability' \
	--mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
	--pax-option='exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime' \
	-- "${top[@]}")

oci=$out/oci
rm -rf "$oci" "$out"/switchyard-*.oci.tar
umoci init --layout "$oci"
umoci new --image "$oci:$version"
umoci raw add-layer --image "$oci:$version" --history.created "$created" \
	--history.created_by 'deploy/image/build.sh' \
	--history.comment "Debian $suite ($packages) from $rootfs_tar, switchyard $version" "$layer"
umoci config --image "$oci:$version" --created "$created" --no-history \
	--author 'Switchyard' \
	--config.user 10001:10001 \
	--config.entrypoint /usr/local/bin/switchyard \
	--config.cmd controller \
	--config.workingdir / \
	--config.env 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--config.exposedports 80/tcp --config.exposedports 443/tcp --config.exposedports 10254/tcp \
	--config.stopsignal SIGTERM \
	--config.label "org.opencontainers.image.title=switchyard" \
	--config.label "org.opencontainers.image.version=$version" \
	--config.label "org.opencontainers.image.created=$created" \
	--config.label "dev.switchyard.image.debian-rootfs=$(basename "$rootfs_tar")"
umoci gc --layout "$oci"

archive=$out/switchyard-$version.oci.tar
tar --create --file "$archive" --directory "$oci" --sort=name --numeric-owner --owner=0 --group=0 \
	--mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime oci-layout index.json blobs

unpacked=$(du -sb --apparent-size "$root" | cut -f1)
echo "build.sh: $oci (tag $version), $archive"
echo "build.sh: size: $(stat -c %s "$archive") bytes compressed (oci-archive), $unpacked bytes unpacked"
