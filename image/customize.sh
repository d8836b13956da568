#!/bin/bash
# mmdebstrap customize hook of image/build.sh: turns the Debian root
# filesystem in $1 into the tinybox OS. $2 is the `make install` staging
# folder, $3 the build's work folder (it receives the package list and the
# archive dates for the manifest). Runs on the build host, as root. The
# environment carries the variant's MODULES_LOAD, DKMS_MODULES, CHECK_MODULES,
# VARIANT (cpu, red, green: os-release's VARIANT_ID), IMAGE_VERSION,
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
# The box has no compiler: DKMS built the modules above for the image's
# kernel; they are kept as plain modules and the build-only packages
# (DKMS, the kernel headers and, through them, gcc and make) leave the image.
# A kernel update comes as a new image, built the same way.
if [ -n "${BUILD_ONLY_PACKAGES:-}" ]; then
    saved="$work/built-modules"
    rm -rf "$saved"
    for kdir in "$root"/lib/modules/*/; do
        kver=$(basename "$kdir")
        [ -d "$kdir/updates" ] || continue
        mkdir -p "$saved/$kver"
        cp -a "$kdir/updates" "$saved/$kver/"
    done
    # Packages the kept ones need stay, even when only a build-only one pulled them in.
    # apt by its full path: the image's /usr/local/sbin/apt-get refuses on the box.
    # shellcheck disable=SC2086 # one package per word
    if [ -n "${KEEP_PACKAGES:-}" ]; then
        chroot "$root" /usr/bin/apt-mark manual $KEEP_PACKAGES >"$work/apt-mark.log" 2>&1 ||
            die "cannot keep $KEEP_PACKAGES (KEEP_PACKAGES): $(tail -1 "$work/apt-mark.log")"
    fi
    # BUILD_ONLY_PACKAGES holds names and globs (linux-headers-*: the kernel's own
    # headers, which apt never autoremoves); each installed package they match goes.
    read -ra wants <<<"$BUILD_ONLY_PACKAGES"
    purge=()
    for pkg in $(chroot "$root" dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }'); do
        for want in "${wants[@]}"; do
            # shellcheck disable=SC2053 # $want is a glob on purpose
            if [[ "$pkg" == $want ]]; then
                purge+=("$pkg")
                break
            fi
        done
    done
    [ ${#purge[@]} -gt 0 ] || die "no installed package matches BUILD_ONLY_PACKAGES ($BUILD_ONLY_PACKAGES)"
    chroot "$root" env DEBIAN_FRONTEND=noninteractive /usr/bin/apt-get purge -y -q --autoremove "${purge[@]}" \
        >"$work/purge.log" 2>&1 || { tail -20 "$work/purge.log" >&2; die "cannot remove the build-only packages ${purge[*]}"; }
    sed -n 's/^Purg \([^ ]*\).*/\1/p; s/^Removing \([^ ]*\) .*/\1/p' "$work/purge.log" | sort -u |
        sed 's/^/build-only, removed: /' >>"$work/dkms.manifest"
    for kver in $(ls "$saved"); do
        mkdir -p "$root/lib/modules/$kver"
        cp -a "$saved/$kver/updates" "$root/lib/modules/$kver/"
        chroot "$root" depmod -a "$kver"
    done
    rm -rf "$saved" "$root/var/lib/dkms"
    for p in $PACKAGES; do
        case " ${purge[*]} " in *" $p "*) continue ;; esac
        chroot "$root" dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed ||
            die "removing the build-only packages also removed $p, which the variant needs (add it to KEEP_PACKAGES)"
    done
    for kver in $(ls "$root/lib/modules"); do
        for mod in $CHECK_MODULES; do
            chroot "$root" modinfo -k "$kver" -F filename "$mod" >/dev/null 2>&1 ||
                die "kernel module $mod for $kver is gone after removing the build-only packages"
        done
    done
    leftovers=$(cd "$root" && find usr/bin usr/sbin usr/src lib/modules -maxdepth 2 \( -name 'gcc*' -o -name cc \
        -o -name 'cpp-*' -o -name make -o -name dkms -o -name 'linux-headers-*' -o -name build \) -printf '/%p ' 2>/dev/null || true)
    [ -z "$leftovers" ] || die "build tools are still in the image after removing the build-only packages: $leftovers"
fi
rm -rf "$root/var/lib/dkms"

# Users and groups from sysusers.d (the tinyperf group of the D-Bus policy).
chroot "$root" systemd-sysusers

systemctl --root="$root" enable \
    tinyperf.service tinybox-firstboot.service \
    systemd-networkd.service systemd-resolved.service systemd-timesyncd.service ssh.service
# tinybox-firstboot does the first-boot setup; the interactive wizard would
# wait for a key press on a box with no one at the console. The state
# partition is set up in the initrd (tinybox-state), so repart must not run
# again once /var is mounted; the root is read-only and never grows.
systemctl --root="$root" mask systemd-firstboot.service systemd-repart.service systemd-growfs-root.service
# The agent's requests (factory reset, update) reach root through path units;
# a newly installed version is kept only when tinyperf-boot-check passes
# (boot-complete.target requires it).
for unit in tinyperf-factory-reset.path tinyperf-update.path tinyperf-boot-check.service; do
    [ ! -e "$root/usr/lib/systemd/system/$unit" ] || systemctl --root="$root" enable "$unit"
done
# The test hook: does nothing unless QEMU hands it a test phase (fw_cfg).
systemctl --root="$root" enable tinybox-test-phase.service tinybox-test-update.service
# systemd-boot on the ESP comes with each image (signed); the package's own
# copy in /usr must not replace it.
systemctl --root="$root" mask systemd-boot-update.service
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
install -d -m 0755 "$root/efi" "$root/raid"

# The version of this image, which its UKI, its slot and its update files are named after.
[ -n "${IMAGE_VERSION:-}" ] || die "no IMAGE_VERSION in the environment"
# VARIANT_ID says which GPU stack it carries (cpu: none).
[ -n "${VARIANT:-}" ] || die "no VARIANT in the environment"
sed -i '/^IMAGE_ID=/d; /^IMAGE_VERSION=/d; /^VARIANT_ID=/d' "$root/usr/lib/os-release"
printf 'VARIANT_ID=%s\nIMAGE_ID=tinybox\nIMAGE_VERSION=%s\n' "$VARIANT" "$IMAGE_VERSION" >>"$root/usr/lib/os-release"

# The root slot is read-only and /var is the state partition, empty at first
# boot: dpkg's database belongs to the image and moves to /usr (tmpfiles
# links it back), root's home moves to /var.
install -d -m 0755 "$root/usr/lib/sysimage"
if [ -d "$root/var/lib/dpkg" ] && [ ! -L "$root/var/lib/dpkg" ]; then
    rm -rf "$root/usr/lib/sysimage/dpkg"
    mv "$root/var/lib/dpkg" "$root/usr/lib/sysimage/dpkg"
    ln -s ../../usr/lib/sysimage/dpkg "$root/var/lib/dpkg"
fi
if [ -d "$root/root" ] && [ ! -L "$root/root" ]; then
    rm -rf "$root/root"
    ln -s var/roothome "$root/root"
fi

# The initrd inside the UKI (dracut: a systemd initrd that sets up dm-verity
# and the state partition), for the image's kernel.
for kdir in "$root"/lib/modules/*/; do
    kver=$(basename "$kdir")
    chroot "$root" dracut --force --kver "$kver" "/boot/initrd.img-$kver" >"$work/dracut-$kver.log" 2>&1 ||
        { tail -20 "$work/dracut-$kver.log" >&2; die "dracut could not build the initrd for $kver"; }
done

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
