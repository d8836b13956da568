#!/bin/bash
# Builds the flashable tinybox OS image: a GPT disk with an EFI system
# partition (systemd-boot, kernel, initrd; written with mtools) and an ext4
# root (mke2fs -d) holding Debian 13 (trixie) and tinyperf. No loop devices
# and no mounts of the image; needs root for mmdebstrap's chroot.
#
#   image/build.sh [--variant cpu|green|red] [--out DIR] [--resolve-only | --rootfs-only]
#
# --rootfs-only stops after the root filesystem: out/image/tinybox-V.rootfs/
# (a folder, what make image-test checks red and green on) and its manifest.
#
# Environment: MIRROR, SECURITY_MIRROR (apt archives), SNAPSHOT (a
# snapshot.debian.org timestamp such as 20251101T000000Z, which replaces both
# mirrors), SOURCE_DATE_EPOCH (file times; defaults to the tinyperf commit time),
# KEEP_BUILD=1 (keep the work folder for inspection), WHEEL_CACHE (where
# downloaded wheels are kept between builds; default OUT/.wheels).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
variant=cpu
out="$repo/out/image"
resolve_only=0
rootfs_only=0
suite=trixie

die() {
    echo "make image: $*" >&2
    exit 1
}
note() { echo "image: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --variant) variant=${2:?--variant needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --resolve-only) resolve_only=1; shift ;;
    --rootfs-only) rootfs_only=1; shift ;;
    -h | --help) sed -n "2,/^set -euo/{/^#/p}" "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# --- Checks before anything is written -------------------------------------

variant_file="$repo/image/variants/$variant.conf"
if [[ ! "$variant" =~ ^[a-z0-9-]+$ ]] || [ ! -f "$variant_file" ]; then
    known=$(find "$repo/image/variants" -maxdepth 1 -name '*.conf' -printf '%f\n' | sed 's/\.conf$//' | sort | tr '\n' ' ' | sed 's/ $//')
    die "no variant '$variant' (known: $known)"
fi
DESCRIPTION="" COMPONENTS="main" PACKAGES="" APT_SOURCES="" KEYRINGS="" MODULES_LOAD="" MIN_FREE_GIB=5 ROOTFS_MIN_FREE_GIB=2
DPKG_EXCLUDES="" WHEELS="" DKMS_MODULES="" CHECK_MODULES=""
# shellcheck source=/dev/null
. "$variant_file"
[ -n "$DESCRIPTION" ] || die "$variant_file sets no DESCRIPTION"
export MODULES_LOAD DKMS_MODULES CHECK_MODULES
if [ -d "$repo/image/variants/$variant.rootfs" ]; then
    export VARIANT_ROOTFS="$repo/image/variants/$variant.rootfs"
else
    export VARIANT_ROOTFS=""
fi
for k in $KEYRINGS; do
    [ -f "$repo/image/variants/$k" ] || die "$variant_file names keyring $k, which is not in image/variants/"
done

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap builds the root filesystem in a chroot); try: sudo make image"
if ! grep -qs '^VERSION_ID="12"' /etc/os-release || ! grep -qs '^ID=debian' /etc/os-release; then
    die "the build host must be Debian 12 (bookworm)"
fi

"$repo/image/host-deps.sh" build || die "cannot install the build tools (see above)"
for tool in mmdebstrap mcopy mmd mkfs.vfat sfdisk mke2fs zstd bmaptool sha256sum curl python3; do
    command -v "$tool" >/dev/null || die "missing tool '$tool' on the build host"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
free_kib=$(df -Pk "$out" | awk 'NR == 2 { print $4 }')
need_gib=$MIN_FREE_GIB what="variant $variant"
[ "$rootfs_only" = 0 ] || need_gib=$ROOTFS_MIN_FREE_GIB what="the root filesystem of variant $variant"
[ "$free_kib" -ge $((need_gib * 1024 * 1024)) ] ||
    die "not enough free disk in $out: $((free_kib / 1024 / 1024)) GiB free, $what needs $need_gib GiB"

if [ -n "${SNAPSHOT:-}" ]; then
    [[ "$SNAPSHOT" =~ ^[0-9]{8}T[0-9]{6}Z$ ]] || die "SNAPSHOT=$SNAPSHOT is not a timestamp like 20251101T000000Z"
    MIRROR="http://snapshot.debian.org/archive/debian/$SNAPSHOT"
    SECURITY_MIRROR="http://snapshot.debian.org/archive/debian-security/$SNAPSHOT"
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
for url in "$MIRROR/dists/$suite/InRelease" "$SECURITY_MIRROR/dists/$suite-security/InRelease"; do
    curl -fsS -o /dev/null --max-time 30 "$url" 2>/dev/null ||
        die "the archive is unreachable: cannot fetch $url (set MIRROR= / SECURITY_MIRROR= or SNAPSHOT=)"
done

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}
version=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
name="tinybox-$variant"

# --- Work folder; only complete outputs are renamed into $out -----------

work=$(mktemp -d "$out/.build-$variant.XXXXXX")
cleanup() {
    if [ "${KEEP_BUILD:-0}" = 1 ]; then
        note "kept the work folder $work"
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$(date +%s)
note "variant $variant: $DESCRIPTION"
note "archive $MIRROR ($suite), security $SECURITY_MIRROR"

components=${COMPONENTS// /,}
sources=(
    "deb $MIRROR $suite $COMPONENTS"
    "deb $MIRROR $suite-updates $COMPONENTS"
    "deb $SECURITY_MIRROR $suite-security $COMPONENTS"
)
while IFS= read -r line; do
    [ -n "${line// /}" ] && sources+=("$line")
done <<<"$APT_SOURCES"

# The base every variant has: systemd with networkd, D-Bus, systemd-repart
# (its own package from trixie on; it grows the root partition at first boot),
# the kernel with an initramfs, systemd-boot's EFI binary, an SSH server, and
# the tools the agent's inventory and an operator use (man-db and bash-completion
# so that tinyperf's own man pages and completions work over SSH).
base="systemd systemd-sysv udev dbus libpam-systemd systemd-timesyncd systemd-resolved
      systemd-repart linux-image-amd64 initramfs-tools systemd-boot-efi
      openssh-server ca-certificates netbase iproute2 iputils-ping curl jq
      kmod e2fsprogs fdisk pciutils usbutils nvme-cli dmidecode lshw procps less
      man-db bash-completion"
packages=$(echo "$base $PACKAGES" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

exclude_args=()
for glob in $DPKG_EXCLUDES; do
    [[ "$glob" == /* ]] || die "$variant_file: DPKG_EXCLUDES entry '$glob' is not an absolute path"
    exclude_args+=(--dpkgopt="path-exclude=$glob")
done

keyring_args=()
for k in $KEYRINGS; do
    keyring_args+=(--setup-hook="install -D -m 0644 '$repo/image/variants/$k' \"\$1/etc/apt/keyrings/$(basename "$k")\"")
done

if [ "$resolve_only" = 1 ]; then
    note "resolving the package set (mmdebstrap --simulate)"
    mmdebstrap --mode=root --variant=minbase --components="$components" --simulate --verbose \
        --include="$packages" "${keyring_args[@]}" \
        "$suite" /dev/null "${sources[@]}" >"$work/simulate.log" 2>&1 ||
        { tail -30 "$work/simulate.log" >&2; die "the package set of variant $variant does not resolve"; }
    awk '/^Inst / { gsub(/[()]/, "", $3); print $2 "\t" $3 }' "$work/simulate.log" | sort -u >"$work/$name.resolved"
    count=$(wc -l <"$work/$name.resolved")
    [ "$count" -gt 0 ] || die "apt listed no packages for variant $variant (see $work/simulate.log with KEEP_BUILD=1)"
    mv "$work/$name.resolved" "$out/$name.resolved"
    note "variant $variant resolves: $count packages, list in $out/$name.resolved"
    exit 0
fi

# --- Wheels: downloaded, checked against the variant's sha256, unpacked -----

wheel_cache=${WHEEL_CACHE:-$out/.wheels}
wheels="$work/wheels"
mkdir -p "$wheels"
: >"$work/wheels.manifest"
while read -r url sha member dest rest; do
    [ -n "$url" ] || continue
    if [ -z "$dest" ] || [ -n "$rest" ]; then
        die "$variant_file: a WHEELS line is URL SHA256 FOLDER-IN-THE-WHEEL FOLDER-IN-THE-IMAGE, not '$url $sha $member $dest $rest'"
    fi
    [[ "$sha" =~ ^[0-9a-f]{64}$ ]] || die "$variant_file: '$sha' is not a sha256 (for $url)"
    [[ "$dest" == /* ]] || die "$variant_file: the wheel's folder in the image, '$dest', is not an absolute path"
    file=$(basename "$url")
    [[ "$file" =~ ^([A-Za-z0-9_.]+)-([0-9][A-Za-z0-9_.+]*)-.*\.whl$ ]] || die "$url does not name a wheel file"
    wheel_name=${BASH_REMATCH[1]} wheel_version=${BASH_REMATCH[2]}
    mkdir -p "$wheel_cache"
    cached="$wheel_cache/$file"
    if [ ! -f "$cached" ]; then
        note "downloading $file"
        curl -fsSL --retry 3 --max-time 1800 -o "$cached.part" "$url" ||
            { rm -f "$cached.part"; die "cannot download $url"; }
        got=$(sha256sum "$cached.part" | cut -d' ' -f1)
        if [ "$got" != "$sha" ]; then
            rm -f "$cached.part"
            die "wheel $file has sha256 $got, but $variant_file expects $sha; stopped before building anything"
        fi
        mv "$cached.part" "$cached"
    fi
    got=$(sha256sum "$cached" | cut -d' ' -f1)
    [ "$got" = "$sha" ] ||
        die "wheel $file (kept in $wheel_cache) has sha256 $got, but $variant_file expects $sha; stopped before building anything (delete the kept file if it is damaged)"
    # The runtime libraries under FOLDER-IN-THE-WHEEL, byte for byte, each
    # checked against the wheel's RECORD; the licence from its dist-info; a
    # SHA256SUMS of the libraries from RECORD that the image test checks again.
    python3 - "$cached" "$member" "$wheels$dest" "$wheel_name" <<'PY' || die "cannot unpack $file (see above)"
import base64, hashlib, os, sys, zipfile
wheel, member, dest, name = sys.argv[1:5]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    record = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        sys.exit(f"{wheel}: no RECORD")
    digests = {}
    for line in z.read(record).decode().splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            raw = base64.urlsafe_b64decode(parts[1][7:] + "=" * (-len(parts[1][7:]) % 4))
            digests[parts[0]] = raw.hex()
    libs = [n for n in names if n.startswith(member.rstrip("/") + "/") and ".so" in os.path.basename(n)]
    if not libs:
        sys.exit(f"{wheel}: no shared libraries under {member}/")
    sums = []
    for n in sorted(libs):
        data = z.read(n)
        digest = hashlib.sha256(data).hexdigest()
        if digests.get(n) != digest:
            sys.exit(f"{wheel}: {n} does not match the wheel's RECORD")
        base = os.path.basename(n)
        with open(os.path.join(dest, base), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(dest, base), 0o644)
        sums.append(f"{digest}  {base}\n")
    licences = [n for n in names if ".dist-info/" in n and "licen" in os.path.basename(n).lower()]
    if not licences:
        sys.exit(f"{wheel}: no licence file in its dist-info")
    for n in licences:
        with open(os.path.join(dest, f"{name}.{os.path.basename(n)}"), "wb") as f:
            f.write(z.read(n))
    with open(os.path.join(dest, f"{name}.SHA256SUMS"), "w") as f:
        f.writelines(sums)
PY
    echo "wheel: $wheel_name $wheel_version sha256=$sha $file -> $dest" >>"$work/wheels.manifest"
    note "wheel $wheel_name $wheel_version: sha256 checked, runtime libraries unpacked for $dest"
done <<<"$WHEELS"
export WHEELS_DIR="$wheels"

# --- Root filesystem --------------------------------------------------------

stage="$work/stage"
note "installing tinyperf into a staging folder (make install)"
make -s -C "$repo" install DESTDIR="$stage" PREFIX=/usr >"$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log" >&2; die "make install failed"; }
[ -x "$stage/usr/bin/tinyperf" ] || die "make install put no /usr/bin/tinyperf into $stage"

rootfs="$work/rootfs"
note "building the root filesystem with mmdebstrap (a few minutes)"
mmdebstrap --mode=root --variant=minbase --components="$components" \
    --include="$packages" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    "${exclude_args[@]}" \
    "${keyring_args[@]}" \
    --customize-hook="'$repo/image/customize.sh' \"\$1\" '$stage' '$work'" \
    "$suite" "$rootfs" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1 || {
    tail -40 "$work/mmdebstrap.log" >&2
    # The package a variant needs but the archive lacks, or the customize
    # hook's own reason (DKMS, a missing file), before the generic message.
    absent=$(sed -nE "s/^E: Unable to locate package (.*)$/\1/p; s/^E: Package '([^']*)' has no installation candidate$/\1/p" \
        "$work/mmdebstrap.log" | sort -u | tr '\n' ' ')
    [ -z "$absent" ] || die "the archive ($MIRROR $suite, $COMPONENTS) has no package ${absent% } that variant $variant needs"
    [ ! -s "$work/customize.failed" ] || die "$(cat "$work/customize.failed")"
    die "mmdebstrap failed (full log: rerun with KEEP_BUILD=1, $work/mmdebstrap.log)"
}
rootfs_done=$(date +%s)
# The wheels' libraries are in the tree now.
rm -rf "$wheels"

kernel=$(find "$rootfs/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -1)
if [ -z "$kernel" ] || [ ! -f "$rootfs/boot/initrd.img-$kernel" ]; then
    die "the root filesystem has no kernel and initrd in /boot"
fi

# write_manifest FILE [LINE...]: what the image is made of; the LINEs go
# before the package list.
write_manifest() {
    local file=$1
    shift
    {
        echo "# tinybox OS image manifest"
        echo "variant: $variant"
        echo "description: $DESCRIPTION"
        echo "tinyperf: $version"
        echo "kernel: $kernel"
        echo "suite: $suite"
        echo "components: $COMPONENTS"
        echo "mirror: $MIRROR"
        echo "security-mirror: $SECURITY_MIRROR"
        [ -n "${SNAPSHOT:-}" ] && echo "snapshot: $SNAPSHOT"
        while IFS= read -r line; do [ -n "$line" ] && echo "extra-source: $line"; done <<<"$APT_SOURCES"
        echo "source-date-epoch: $SOURCE_DATE_EPOCH"
        # The archive's state the packages came from: each index's Date.
        cat "$work/release-dates"
        # Files from outside the archive (wheels: name, version, sha256) and
        # the kernel modules DKMS built.
        cat "$work/wheels.manifest"
        [ ! -f "$work/dkms.manifest" ] || cat "$work/dkms.manifest"
        for line in "$@"; do echo "$line"; done
        echo "packages: $(wc -l <"$work/packages")"
        echo
        cat "$work/packages"
    } >"$file"
}

if [ "$rootfs_only" = 1 ]; then
    write_manifest "$work/$name.rootfs.manifest" "rootfs-mib: $(du -sm --apparent-size "$rootfs" | cut -f1)"
    rm -rf --one-file-system "${out:?}/$name.rootfs" "$out/$name.rootfs.manifest"
    mv "$rootfs" "$out/$name.rootfs"
    mv "$work/$name.rootfs.manifest" "$out/$name.rootfs.manifest"
    finished=$(date +%s)
    note "built the root filesystem $out/$name.rootfs in $((finished - started)) s ($(du -sm "$out/$name.rootfs" | cut -f1) MiB)"
    printf 'rootfs_s=%s\nrootfs_mib=%s\n' "$((finished - started))" "$(du -sm "$out/$name.rootfs" | cut -f1)" \
        >"$out/$name.rootfs.build-stats"
    exit 0
fi

# --- EFI system partition (FAT, written with mtools) ------------------------

esp_mib=256
esp="$work/esp.img"
export MTOOLS_SKIP_CHECK=1
truncate -s ${esp_mib}M "$esp"
mkfs.vfat -F 32 -n ESP -i "$(printf '%08x' $((SOURCE_DATE_EPOCH & 0xffffffff)))" "$esp" >/dev/null
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/systemd ::/loader ::/loader/entries ::/tinybox
bootloader="$rootfs/usr/lib/systemd/boot/efi/systemd-bootx64.efi"
[ -f "$bootloader" ] || die "systemd-boot-efi left no systemd-bootx64.efi in the root filesystem"
mcopy -i "$esp" "$bootloader" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$esp" "$bootloader" ::/EFI/systemd/systemd-bootx64.efi
mcopy -i "$esp" "$rootfs/boot/vmlinuz-$kernel" ::/tinybox/vmlinuz
mcopy -i "$esp" "$rootfs/boot/initrd.img-$kernel" ::/tinybox/initrd.img
printf 'default tinybox.conf\ntimeout 0\nconsole-mode keep\n' >"$work/loader.conf"
cat >"$work/tinybox.conf" <<EOF
title   tinybox ($variant, tinyperf $version)
version $kernel
linux   /tinybox/vmlinuz
initrd  /tinybox/initrd.img
options root=PARTLABEL=root rw rootwait console=tty0 console=ttyS0,115200 systemd.show_status=auto
EOF
cat >"$work/authorized_keys.txt" <<'EOF'
Put SSH public keys for root into a file named authorized_keys in this folder
before the first boot; the first boot installs them as /root/.ssh/authorized_keys.
EOF
mcopy -i "$esp" "$work/loader.conf" ::/loader/loader.conf
mcopy -i "$esp" "$work/tinybox.conf" ::/loader/entries/tinybox.conf
mcopy -i "$esp" "$work/authorized_keys.txt" ::/tinybox/README.txt

# --- ext4 root (mke2fs -d) and the GPT disk ---------------------------------

used_mib=$(du -sm --apparent-size "$rootfs" | cut -f1)
# Room for the first boot, logs and run records until the root grows to the disk.
root_mib=$(((used_mib * 13 / 10 + 384 + 63) / 64 * 64))
fs_uuid=$(echo "$name $SOURCE_DATE_EPOCH" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
raw="$work/$name.raw"
total_mib=$((1 + esp_mib + root_mib + 1))
truncate -s "${total_mib}M" "$raw"
note "ext4 root: ${used_mib} MiB of files in a ${root_mib} MiB filesystem"
# Straight into the root partition's place in the disk image: a separate
# root.img copied in would hold the whole filesystem on disk a second time.
# nodiscard: punching holes is pointless in a fresh sparse file.
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mke2fs -q -t ext4 -L root -U "$fs_uuid" \
    -E hash_seed="$fs_uuid",offset=$(((1 + esp_mib) * 1024 * 1024)),nodiscard \
    -d "$rootfs" "$raw" "${root_mib}M" >/dev/null
# Everything the image needs from the tree is in the disk image now; the tree
# goes before compressing, so a variant's peak disk use is the tree or the
# image plus its compressed copy, not all three.
rm -rf --one-file-system "$rootfs"
sfdisk -q "$raw" <<EOF
label: gpt
label-id: $(echo "$name disk $SOURCE_DATE_EPOCH" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
start=1MiB, size=${esp_mib}MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=$((1 + esp_mib))MiB, size=${root_mib}MiB, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name=root
EOF
dd if="$esp" of="$raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$esp"

# --- Compressed copy, block map, manifest, checksums ------------------------

note "compressing (zstd)"
zstd -q -T0 -10 --long=27 "$raw" -o "$raw.zst"
bmaptool -q create -o "$work/$name.bmap" "$raw"

manifest="$work/$name.manifest"
write_manifest "$manifest" \
    "raw-bytes: $(stat -c %s "$raw")" "esp-mib: $esp_mib" "root-mib: $root_mib"

(cd "$work" && sha256sum "$name.raw" "$name.raw.zst" "$name.bmap" "$name.manifest" >"$name.SHA256SUMS")

for f in "$name.raw" "$name.raw.zst" "$name.bmap" "$name.manifest" "$name.SHA256SUMS"; do
    mv -f "$work/$f" "$out/$f"
done

finished=$(date +%s)
raw_bytes=$(stat -c %s "$out/$name.raw")
zst_bytes=$(stat -c %s "$out/$name.raw.zst")
note "built $out/$name.raw in $((finished - started)) s (root filesystem $((rootfs_done - started)) s)"
note "raw $((raw_bytes / 1024 / 1024)) MiB ($(du -m "$out/$name.raw" | cut -f1) MiB allocated), zstd $((zst_bytes / 1024 / 1024)) MiB"
printf 'build_s=%s\nrootfs_s=%s\nraw_bytes=%s\nzst_bytes=%s\n' \
    "$((finished - started))" "$((rootfs_done - started))" "$raw_bytes" "$zst_bytes" >"$out/$name.build-stats"
