#!/bin/bash
# mmdebstrap customize hook of image/build.sh: turns the Debian root
# filesystem in $1 into the tinybox OS. $2 is the `make install` staging
# folder, $3 the build's work folder (it receives the package list and the
# archive dates for the manifest). Runs on the build host, as root. The
# environment carries the variant's MODULES_LOAD, DKMS_MODULES, CHECK_MODULES,
# VARIANT_ROOTFS (its overlay folder, or empty) and WHEELS_DIR (the unpacked
# wheels, laid out as in the image).
set -euo pipefail

root=$1
stage=$2
work=$3
repo=$(cd "$(dirname "$0")/.." && pwd)

# The reason also goes to the work folder, where build.sh reports it.
die() {
    echo "customize: $*" >&2
    echo "$*" >"$work/customize.failed"
    exit 1
}

# tinyperf and its system files, where DESIGN.md puts them.
cp -a "$stage/." "$root/"
# The image's own units, scripts, network and repart configuration, fstab.
cp -r --preserve=mode "$repo/image/rootfs/." "$root/"
chown -R root:root "$root/usr/lib/tinybox" "$root/usr/lib/repart.d" "$root/etc/fstab"
# The variant's own files (green: the unit drop-in with cuDNN's library path).
if [ -n "${VARIANT_ROOTFS:-}" ]; then
    cp -r --preserve=mode "$VARIANT_ROOTFS/." "$root/"
    (cd "$VARIANT_ROOTFS" && find . -mindepth 1) | while read -r f; do chown -h root:root "$root/$f"; done
fi
# Libraries from wheels (green: cuDNN), unchanged, with their licences.
if [ -n "${WHEELS_DIR:-}" ] && [ -n "$(ls -A "$WHEELS_DIR")" ]; then
    cp -r --preserve=mode "$WHEELS_DIR/." "$root/"
    (cd "$WHEELS_DIR" && find . -mindepth 1) | while read -r f; do chown -h root:root "$root/$f"; done
fi

chroot "$root" /usr/bin/tinyperf --version >/dev/null ||
    die "the tinyperf binary does not run in the image (built for another libc?)"

# The box runs the acceptance suite at every agent start.
config="$root/etc/tinyperf/tinyperf.toml"
[ -f "$config" ] || die "make install left no /etc/tinyperf/tinyperf.toml"
if grep -q '^# boot_suite = ' "$config"; then
    sed -i 's/^# boot_suite = .*/boot_suite = "acceptance"/' "$config"
elif ! grep -q '^boot_suite = ' "$config"; then
    printf '\nboot_suite = "acceptance"\n' >>"$config"
fi
grep -q '^boot_suite = "acceptance"$' "$config" || die "cannot set boot_suite in $config"

# Kernel modules a variant wants loaded at boot (nvidia-uvm on green: the
# agent's unit resolves its device group when it starts).
if [ -n "${MODULES_LOAD:-}" ]; then
    install -d "$root/usr/lib/modules-load.d"
    # shellcheck disable=SC2086 # one module per word
    printf '%s\n' $MODULES_LOAD >"$root/usr/lib/modules-load.d/tinybox-gpu.conf"
fi

# DKMS modules (green: the NVIDIA driver) for every kernel in the image, not
# the build host's: dkms builds them when the package is configured; if that
# did not happen (headers configured later), build them now. Then each module
# the variant needs must exist for the kernel with the kernel's vermagic.
: >"$work/dkms.manifest"
for kdir in "$root"/lib/modules/*/; do
    [ -n "${DKMS_MODULES:-}" ] || break
    kver=$(basename "$kdir")
    [ -e "$kdir/build" ] || die "no kernel headers for $kver in the image (the variant needs DKMS modules: add linux-headers-amd64)"
    dkms_installed() {
        local st
        st=$(chroot "$root" dkms status -m "$1" -k "$kver" 2>/dev/null || true)
        [[ "$st" == *": installed"* ]]
    }
    for m in $DKMS_MODULES; do
        if ! dkms_installed "$m"; then
            chroot "$root" dkms autoinstall -k "$kver" >"$work/dkms-$kver.log" 2>&1 || true
        fi
        if ! dkms_installed "$m"; then
            tail -20 "$work/dkms-$kver.log" >&2 2>/dev/null || true
            for log in "$root/var/lib/dkms/$m"/*/build/make.log "$root/var/lib/dkms/$m"/*/"$kver"/*/log/make.log; do
                [ -f "$log" ] && { echo "--- ${log#"$root"}" >&2; tail -30 "$log" >&2; }
            done
            st=$(chroot "$root" dkms status -m "$m" 2>&1 | tr '\n' ' ')
            die "DKMS did not build $m for kernel $kver (dkms status: ${st:-nothing for $m; does a package in PACKAGES ship it?})"
        fi
        echo "dkms: $(chroot "$root" dkms status -m "$m" -k "$kver" | head -1)" >>"$work/dkms.manifest"
    done
    in_tree=$(find "$kdir/kernel" -name '*.ko*' -print -quit)
    [ -n "$in_tree" ] || die "kernel $kver has no modules under $kdir/kernel"
    want=$(chroot "$root" modinfo -F vermagic "${in_tree#"$root"}")
    for mod in $CHECK_MODULES; do
        got=$(chroot "$root" modinfo -k "$kver" -F vermagic "$mod" 2>&1) ||
            die "no kernel module $mod for kernel $kver in the image: $got"
        [ "$got" = "$want" ] || die "kernel module $mod has vermagic '$got', kernel $kver wants '$want'"
        echo "module: $mod $(chroot "$root" modinfo -k "$kver" -F filename "$mod" | sed 's|^/usr||') vermagic=$got" >>"$work/dkms.manifest"
    done
done
# dkms signs what it builds with a key pair it made in this build; the private
# key would be the same secret in every image, so only the certificate stays
# (enrol it for Secure Boot). A kernel update on the box makes a new pair.
rm -f "$root/var/lib/dkms/mok.key"

# Users and groups from sysusers.d (the tinyperf group of the D-Bus policy).
chroot "$root" systemd-sysusers

systemctl --root="$root" enable \
    tinyperf.service tinybox-firstboot.service \
    systemd-networkd.service systemd-resolved.service systemd-timesyncd.service ssh.service
# tinybox-firstboot does the first-boot setup; the interactive wizard would
# wait for a key press on a box with no one at the console.
systemctl --root="$root" mask systemd-firstboot.service
# systemd-resolved's stub resolver for the addresses DHCP hands out.
ln -sf ../run/systemd/resolve/stub-resolv.conf "$root/etc/resolv.conf"

# Nothing that identifies a box or could be a secret stays in the image.
: >"$root/etc/machine-id"
if [ -f "$root/var/lib/dbus/machine-id" ] && [ ! -L "$root/var/lib/dbus/machine-id" ]; then
    rm -f "$root/var/lib/dbus/machine-id"
fi
rm -f "$root"/etc/ssh/ssh_host_*
rm -f "$root/etc/tinyperf/token"
rm -f "$root/var/lib/systemd/random-seed"
echo tinybox >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\ttinybox\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
rm -rf "$root"/var/log/*.log "$root/var/log/apt" "$root/var/cache/debconf"/*-old
install -d -m 0755 "$root/boot/efi"

# For the manifest: every package and the date of every archive index used.
# shellcheck disable=SC2016 # dpkg-query's own format fields
chroot "$root" dpkg-query -W -f '${binary:Package}\t${Version}\n' | sort >"$work/packages"
for rel in "$root"/var/lib/apt/lists/*_InRelease; do
    [ -e "$rel" ] || continue
    origin=$(basename "$rel" | sed 's/_InRelease$//; s/_dists_/ /; s/_/\//g')
    date=$(sed -n 's/^Date: //p' "$rel" | head -1)
    echo "archive: $origin ($date)"
done >"$work/release-dates"
[ -s "$work/release-dates" ] || die "no apt index in the root filesystem to date the archive by"
