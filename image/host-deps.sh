#!/bin/bash
# Installs the host tools that `make image` (build), `make image-test` (test: the cpu
# image's boot test; rootfs-test: the red and green checks) need,
# if any is missing. Debian 12 only; needs root when something must be installed.
set -euo pipefail

what=${1:-build}
case "$what" in
build)
    # command -> Debian package
    tools="mmdebstrap:mmdebstrap mcopy:mtools mkfs.vfat:dosfstools sfdisk:fdisk
           mke2fs:e2fsprogs zstd:zstd bmaptool:bmap-tools sha256sum:coreutils curl:curl
           python3:python3 xz:xz-utils jq:jq openssl:openssl unshare:util-linux
           gpg:gpg gpgv:gpgv gpgconf:gpgconf gpg-agent:gpg-agent"
    ;;
test)
    # nc, gpg, xz: the update test's relay to its server, and its own update folders.
    tools="qemu-system-x86_64:qemu-system-x86 curl:curl jq:jq ss:iproute2 sfdisk:fdisk mcopy:mtools
           nc:netcat-openbsd gpg:gpg gpgconf:gpgconf gpg-agent:gpg-agent xz:xz-utils python3:python3"
    ;;
rootfs-test)
    # The red and green checks run the image's own programs; the host only
    # enters the namespaces and, for a .raw image, copies its root out.
    tools="unshare:util-linux chroot:coreutils mount:mount sfdisk:fdisk jq:jq mmdebstrap:mmdebstrap systemd-tmpfiles:systemd"
    ;;
*)
    echo "host-deps.sh: unknown set '$what' (build, test or rootfs-test)" >&2
    exit 2
    ;;
esac

missing=()
for pair in $tools; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "$what" = test ] && [ ! -e /usr/share/ovmf/OVMF.fd ]; then
    missing+=(ovmf)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "image: installing host tools: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "image: need root to install: ${missing[*]}" >&2
    exit 1
fi
if ! grep -qs '^ID=debian' /etc/os-release || ! grep -qs '^VERSION_ID="12"' /etc/os-release; then
    echo "image: the build host must be Debian 12 (bookworm); install by hand: ${missing[*]}" >&2
    exit 1
fi

backports=()
for p in "${missing[@]}"; do
    # bookworm's QEMU 7.2 cannot be installed beside a qemu-utils from backports,
    # and backports' 10.x boots OVMF the same way: take QEMU from backports.
    if [ "$p" = qemu-system-x86 ]; then backports+=("$p"); fi
done
if [ ${#backports[@]} -gt 0 ] && ! apt-cache policy 2>/dev/null | grep -q 'bookworm-backports'; then
    cat >/etc/apt/sources.list.d/bookworm-backports.sources <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    echo "image: added /etc/apt/sources.list.d/bookworm-backports.sources for ${backports[*]}"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
plain=()
for p in "${missing[@]}"; do
    [[ " ${backports[*]} " == *" $p "* ]] || plain+=("$p")
done
if [ ${#plain[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${plain[@]}"
fi
if [ ${#backports[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends -t bookworm-backports "${backports[@]}"
fi
