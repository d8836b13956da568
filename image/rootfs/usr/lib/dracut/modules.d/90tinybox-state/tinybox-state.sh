#!/bin/sh
# Runs in the initrd after the verified root is mounted at /sysroot.
#  1. systemd-repart, with the image's own definitions, on the disk that holds
#     the root: creates the state partition (first boot), grows it (a larger
#     disk), or erases and creates it again (systemd.factory_reset=1).
#  2. Mounts it at /sysroot/var.
#  3. Mounts /sysroot/etc as an overlay: the image's /etc below, the box's
#     own changes (hostname, machine-id, SSH host keys, the token, tinyperf
#     overrides) on the state partition above.
set -eu

log() { echo "tinybox-state: $*"; }
fail() {
    echo "tinybox-state: $*" >&2
    exit 1
}

root_source=$(findmnt -n -o SOURCE /sysroot) || fail "nothing is mounted at /sysroot"
dm=$(basename "$(readlink -f "$root_source")")
[ -d "/sys/block/$dm/slaves" ] || fail "/sysroot comes from $root_source, not a dm-verity device"
part=$(ls "/sys/block/$dm/slaves" | head -n 1)
[ -n "$part" ] || fail "the root device $dm has no underlying partition"
disk=$(basename "$(readlink -f "/sys/class/block/$part/..")")
[ -b "/dev/$disk" ] || fail "no block device /dev/$disk for the root's partition $part"

case " $(cat /proc/cmdline) " in
*" systemd.factory_reset=1 "* | *" systemd.factory_reset=yes "*)
    log "factory reset: the state partition is erased and created again" ;;
esac
SYSTEMD_LOG_TARGET=console systemd-repart --dry-run=no --definitions=/sysroot/usr/lib/repart.d "/dev/$disk" ||
    fail "systemd-repart could not set up the state partition on /dev/$disk"
udevadm settle --timeout=30 || true

var=/dev/disk/by-partlabel/var
tries=0
while [ ! -b "$var" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 60 ] || fail "no partition labelled var on /dev/$disk after repart"
    sleep 0.5
done
mount -t ext4 -o rw,noatime "$var" /sysroot/var || fail "cannot mount the state partition $var"

upper=/sysroot/var/lib/tinybox/etc/upper
workdir=/sysroot/var/lib/tinybox/etc/work
mkdir -p "$upper" "$workdir"
mount -t overlay overlay -o "lowerdir=/sysroot/etc,upperdir=$upper,workdir=$workdir" /sysroot/etc ||
    fail "cannot mount /etc's overlay"
log "state partition $(readlink -f "$var") on /var, /etc overlaid on it"
