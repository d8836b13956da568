#!/bin/bash
# Builds the flashable tinybox OS image: a GPT disk with an EFI system
# partition (systemd-boot, kernel, initrd; written with mtools) and an ext4
# root (mke2fs -d) holding Debian 13 (trixie) and tinyperf. No loop devices
# and no mounts of the image; needs root for mmdebstrap's chroot.
#
#   image/build.sh [--variant cpu|green|red] [--out DIR] [--resolve-only | --rootfs-only]
#                  [--keep-rootfs] [--from-rootfs DIR [--overlay DIR]]
#
# --rootfs-only stops after the root filesystem: out/image/tinybox-V.rootfs/
# (a folder, what make image-test checks red and green on) and its manifest.
# --keep-rootfs (or KEEP_ROOTFS=1) also keeps the finished root filesystem tree
# of the build as OUT/tinybox-V.rootfs-tree/ (with what its manifest needs in
# OUT/tinybox-V.rootfs-tree.build/). --from-rootfs DIR builds the slot, the UKI,
# the disk and the update files from a copy of such a tree, without mmdebstrap,
# under a new IMAGE_VERSION (which must be given); --overlay DIR copies DIR's
# files into the tree first. The update test makes its later versions this way.
#
# Environment: MIRROR, SECURITY_MIRROR (apt archives), SNAPSHOT (a
# snapshot.debian.org timestamp such as 20251101T000000Z, which replaces both
# mirrors), SOURCE_DATE_EPOCH (file times; defaults to the tinyperf commit time),
# KEEP_BUILD=1 (keep the work folder for inspection), WHEEL_CACHE (where
# downloaded wheels are kept between builds; default OUT/.wheels),
# UPDATE_SIGNING_KEY (an armored OpenPGP secret key file, never in the tree,
# that signs the update files' SHA256SUMS; without it a throwaway test key is
# made once and kept in OUT/.update-signing/), UPDATE_SIGNING_PASSPHRASE_FILE
# (the key's passphrase, if it has one).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
variant=cpu
out="$repo/out/image"
resolve_only=0
rootfs_only=0
keep_rootfs=${KEEP_ROOTFS:-0}
from_rootfs=""
overlay=""
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
    --keep-rootfs) keep_rootfs=1; shift ;;
    --from-rootfs) from_rootfs=${2:?--from-rootfs needs a folder}; shift 2 ;;
    --overlay) overlay=${2:?--overlay needs a folder}; shift 2 ;;
    -h | --help) sed -n "2,/^set -euo/{/^#/p}" "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# --- Checks before anything is written -------------------------------------

case "$keep_rootfs" in 0 | 1) ;; *) die "KEEP_ROOTFS=$keep_rootfs: use 1 or 0" ;; esac
if [ -n "$from_rootfs" ]; then
    [ "$resolve_only" = 0 ] && [ "$rootfs_only" = 0 ] || die "--from-rootfs builds an image; it does not go with --resolve-only or --rootfs-only"
    [ -f "$from_rootfs/usr/lib/os-release" ] || die "--from-rootfs $from_rootfs: no root filesystem tree there (no usr/lib/os-release; make one with --keep-rootfs)"
    [ -f "$from_rootfs.build/packages" ] ||
        die "--from-rootfs $from_rootfs: no $from_rootfs.build/ beside it (what the manifest needs; --keep-rootfs writes both)"
    [ -n "${IMAGE_VERSION:-}" ] || die "--from-rootfs needs IMAGE_VERSION= (a version other than the tree's own)"
    from_rootfs=$(cd "$from_rootfs" && pwd)
fi
if [ -n "$overlay" ]; then
    [ -n "$from_rootfs" ] || die "--overlay goes with --from-rootfs"
    [ -d "$overlay" ] || die "--overlay $overlay is not a folder"
    overlay=$(cd "$overlay" && pwd)
fi

variant_file="$repo/image/variants/$variant.conf"
if [[ ! "$variant" =~ ^[a-z0-9-]+$ ]] || [ ! -f "$variant_file" ]; then
    known=$(find "$repo/image/variants" -maxdepth 1 -name '*.conf' -printf '%f\n' | sed 's/\.conf$//' | sort | tr '\n' ' ' | sed 's/ $//')
    die "no variant '$variant' (known: $known)"
fi
DESCRIPTION="" COMPONENTS="main" PACKAGES="" APT_SOURCES="" KEYRINGS="" MODULES_LOAD="" MIN_FREE_GIB=5 ROOTFS_MIN_FREE_GIB=2
DPKG_EXCLUDES="" WHEELS="" DKMS_MODULES="" CHECK_MODULES="" BUILD_ONLY_PACKAGES="" KEEP_PACKAGES="" SLOT_MIB=""
# shellcheck source=/dev/null
. "$variant_file"
[ -n "$DESCRIPTION" ] || die "$variant_file sets no DESCRIPTION"
[[ "$SLOT_MIB" =~ ^[0-9]+$ ]] || die "$variant_file sets no SLOT_MIB (the size of each OS slot, in MiB)"
export MODULES_LOAD DKMS_MODULES CHECK_MODULES BUILD_ONLY_PACKAGES KEEP_PACKAGES PACKAGES
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
for tool in mmdebstrap sfdisk zstd bmaptool sha256sum curl python3 jq openssl unshare xz gpg gpgv gpgconf gpg-agent; do
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
    [ -z "$from_rootfs" ] || break
    curl -fsS -o /dev/null --max-time 30 "$url" 2>/dev/null ||
        die "the archive is unreachable: cannot fetch $url (set MIRROR= / SECURITY_MIRROR= or SNAPSHOT=)"
done

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}
version=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
# The OS version: what os-release's IMAGE_VERSION, the UKI, the slot's
# partitions and the update files are named after. Later builds sort higher.
IMAGE_VERSION=${IMAGE_VERSION:-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d.%H%M%S)}
[[ "$IMAGE_VERSION" =~ ^[0-9][0-9A-Za-z.~^]{0,23}$ ]] ||
    die "IMAGE_VERSION=$IMAGE_VERSION: use digits, letters, '.', '~' or '^' (no '_', '-' or '+'), at most 24 characters, starting with a digit"
export IMAGE_VERSION VARIANT=$variant
name="tinybox-$variant"
if [ -n "$from_rootfs" ]; then
    tree_variant=$(sed -n 's/^VARIANT_ID=//p' "$from_rootfs/usr/lib/os-release" | tr -d '"')
    tree_version=$(sed -n 's/^IMAGE_VERSION=//p' "$from_rootfs/usr/lib/os-release" | tr -d '"')
    [ "$tree_variant" = "$variant" ] ||
        die "--from-rootfs $from_rootfs is a tree of variant '${tree_variant:-unknown}', not $variant"
    [ "$tree_version" != "$IMAGE_VERSION" ] ||
        die "--from-rootfs $from_rootfs is version $tree_version already: give a new IMAGE_VERSION="
    # Nothing is downloaded: the tree has its packages and wheels.
    WHEELS=""
fi

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
# (its own package from trixie on; in the initrd it creates the state
# partition), systemd-cryptsetup (dm-verity), bootctl, the kernel with dracut
# for a systemd initrd, systemd-boot's EFI binary, an SSH server, and
# the tools the agent's inventory and an operator use (man-db and bash-completion
# so that tinyperf's own man pages and completions work over SSH). Updates:
# systemd-container (systemd-sysupdate, systemd-pull), gpg and gpgv (the
# signature of the update files), systemd-boot (systemd-bless-boot and its
# generator, which mark a new version good once boot-complete.target is reached).
base="systemd systemd-sysv udev dbus libpam-systemd systemd-timesyncd systemd-resolved
      systemd-repart systemd-cryptsetup systemd-boot-tools linux-image-amd64 dracut systemd-boot-efi
      openssh-server ca-certificates netbase iproute2 iputils-ping curl jq
      kmod e2fsprogs fdisk pciutils usbutils nvme-cli dmidecode lshw procps less
      man-db bash-completion
      systemd-container gpg gpgv systemd-boot"
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

rootfs="$work/rootfs"
if [ -n "$from_rootfs" ]; then
    note "root filesystem: a copy of $from_rootfs (version $tree_version), as version $IMAGE_VERSION"
    mkdir "$rootfs"
    cp -a --reflink=auto "$from_rootfs/." "$rootfs/"
    for f in packages release-dates wheels.manifest dkms.manifest; do
        [ ! -f "$from_rootfs.build/$f" ] || cp "$from_rootfs.build/$f" "$work/$f"
    done
    touch "$work/wheels.manifest"
    sed -i "s/^IMAGE_VERSION=.*/IMAGE_VERSION=$IMAGE_VERSION/" "$rootfs/usr/lib/os-release"
    grep -qx "IMAGE_VERSION=$IMAGE_VERSION" "$rootfs/usr/lib/os-release" || die "cannot set IMAGE_VERSION in the tree's os-release"
    rebuilt="rebuilt-from: $from_rootfs (version $tree_version)"
    if [ -n "$overlay" ]; then
        cp -r --preserve=mode "$overlay/." "$rootfs/"
        (cd "$overlay" && find . -mindepth 1) | while read -r f; do chown -h root:root "$rootfs/$f"; done
        rebuilt+=", overlay $overlay: $(cd "$overlay" && find . -type f | sed 's|^\.||' | sort | tr '\n' ' ' | sed 's/ $//')"
    fi
    note "$rebuilt"
else
rebuilt=""
stage="$work/stage"
note "installing tinyperf into a staging folder (make install)"
make -s -C "$repo" install DESTDIR="$stage" PREFIX=/usr >"$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log" >&2; die "make install failed"; }
[ -x "$stage/usr/bin/tinyperf" ] || die "make install put no /usr/bin/tinyperf into $stage"

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
fi
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

# --- Secure Boot signing key --------------------------------------------------

# SECUREBOOT_KEY and SECUREBOOT_CERT (PEM files, given by path, never in the
# tree) sign systemd-boot and the UKI. Without them the build makes a
# throwaway key: such an image is for tests only, and says so.
sb="$work/secureboot"
mkdir -m 0700 "$sb"
if [ -n "${SECUREBOOT_KEY:-}" ] || [ -n "${SECUREBOOT_CERT:-}" ]; then
    [ -f "${SECUREBOOT_KEY:-}" ] && [ -f "${SECUREBOOT_CERT:-}" ] ||
        die "SECUREBOOT_KEY and SECUREBOOT_CERT must both name readable files (PEM private key and certificate)"
    install -m 0600 "$SECUREBOOT_KEY" "$sb/db.key"
    install -m 0644 "$SECUREBOOT_CERT" "$sb/db.crt"
    secureboot="key given to the build ($(openssl x509 -noout -subject -in "$sb/db.crt" | sed 's/^subject=//'))"
else
    openssl req -quiet -new -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
        -subj "/CN=tinybox TEST KEY, not for production/" -keyout "$sb/db.key" -out "$sb/db.crt" 2>/dev/null ||
        die "cannot make a throwaway Secure Boot key (openssl)"
    secureboot="THROWAWAY TEST KEY made by this build: this image is for tests only"
    echo "image: ***********************************************************************" >&2
    echo "image: * No SECUREBOOT_KEY/SECUREBOOT_CERT given: signing with a throwaway test   *" >&2
    echo "image: * key. This image is for tests only; never ship it to a box.              *" >&2
    echo "image: ***********************************************************************" >&2
fi
secureboot_sha256=$(openssl x509 -noout -fingerprint -sha256 -in "$sb/db.crt" | sed 's/^.*=//; s/://g' | tr 'A-F' 'a-f')

# --- Update signing key ---------------------------------------------------------

# UPDATE_SIGNING_KEY (an armored OpenPGP secret key, given by path, never in
# the tree) signs SHA256SUMS of the update files (SHA256SUMS.gpg, detached). Its
# public key is the slot's /usr/lib/systemd/import-pubring.gpg, the keyring
# systemd-pull and tinyperf check updates against. Without it the build makes a
# throwaway key once and keeps it in OUT/.update-signing/, so that later test
# builds in the same output folder can update each other.
# gpg's home is short: gpg-agent's socket path must fit in 108 bytes.
gpg_home=$(mktemp -d /tmp/tinybox-gpg.XXXXXX)
gpg_q() { gpg --homedir "$gpg_home" --batch --quiet --no-tty "$@"; }
stop_gpg_agent() { gpgconf --homedir "$gpg_home" --kill gpg-agent >/dev/null 2>&1 || true; }
trap 'stop_gpg_agent; rm -rf "$gpg_home"; cleanup' EXIT
signing_key=${UPDATE_SIGNING_KEY:-}
signing_test=0
if [ -z "$signing_key" ]; then
    signing_key="$out/.update-signing/secret.asc"
    signing_test=1
    if [ ! -f "$signing_key" ]; then
        mkdir -p -m 0700 "$out/.update-signing"
        gpg_q --pinentry-mode loopback --passphrase '' \
            --quick-generate-key "tinybox update TEST KEY, not for production <updates@tinybox.invalid>" ed25519 sign never \
            >"$work/gpg-genkey.log" 2>&1 || { cat "$work/gpg-genkey.log" >&2; die "cannot make a throwaway update signing key (gpg)"; }
        gpg_q --pinentry-mode loopback --passphrase '' --armor --export-secret-keys >"$signing_key.part" &&
            chmod 0600 "$signing_key.part" && mv "$signing_key.part" "$signing_key" ||
            die "cannot keep the throwaway update signing key in $out/.update-signing/"
    fi
fi
[ -f "$signing_key" ] && [ -r "$signing_key" ] || die "UPDATE_SIGNING_KEY=$signing_key is not a readable file"
gpg_q --import "$signing_key" >"$work/gpg-import.log" 2>&1 ||
    { cat "$work/gpg-import.log" >&2; die "cannot import the update signing key $signing_key (an armored OpenPGP secret key?)"; }
mapfile -t signing_fprs < <(gpg_q --with-colons --list-secret-keys | awk -F: '$1 == "sec" { want = 1 } $1 == "fpr" && want { print $10; want = 0 }')
[ ${#signing_fprs[@]} -eq 1 ] ||
    die "$signing_key holds ${#signing_fprs[@]} secret keys; the update signing key must be exactly one"
signing_fpr=${signing_fprs[0]}
signing_uid=$(gpg_q --with-colons --list-secret-keys "$signing_fpr" | awk -F: '$1 == "uid" { print $10; exit }')
[[ "$signing_uid" != *"TEST KEY"* ]] || signing_test=1
gpg_sign_args=(--pinentry-mode loopback --passphrase '')
if [ -n "${UPDATE_SIGNING_PASSPHRASE_FILE:-}" ]; then
    [ -r "$UPDATE_SIGNING_PASSPHRASE_FILE" ] || die "UPDATE_SIGNING_PASSPHRASE_FILE=$UPDATE_SIGNING_PASSPHRASE_FILE is not readable"
    gpg_sign_args=(--pinentry-mode loopback --passphrase-file "$UPDATE_SIGNING_PASSPHRASE_FILE")
fi
echo test | gpg_q "${gpg_sign_args[@]}" --local-user "$signing_fpr" --detach-sign --output /dev/null - 2>"$work/gpg-test.log" ||
    { cat "$work/gpg-test.log" >&2; die "the update signing key $signing_fpr cannot sign (a passphrase? set UPDATE_SIGNING_PASSPHRASE_FILE)"; }
gpg_q --export "$signing_fpr" >"$work/import-pubring.gpg"
if [ "$signing_test" = 1 ]; then
    update_signing="$signing_fpr, THROWAWAY TEST KEY ($signing_uid): updates signed with it are for tests only"
    echo "image: ***********************************************************************" >&2
    echo "image: * No UPDATE_SIGNING_KEY given: the update files are signed with a        *" >&2
    echo "image: * throwaway test key, and the image trusts only updates signed with it.  *" >&2
    echo "image: * This image is for tests only; never ship it to a box.                  *" >&2
    echo "image: ***********************************************************************" >&2
    note "the test key: $signing_key"
else
    update_signing="$signing_fpr ($signing_uid)"
fi
# The slot trusts this key and no other (Debian's keyring of its image signers goes).
rm -f "$rootfs/usr/lib/systemd/import-pubring.gpg"
install -D -m 0644 "$work/import-pubring.gpg" "$rootfs/usr/lib/systemd/import-pubring.gpg"

# --- Verified slots, the UKI and the disk (trixie's systemd-repart and ukify) --

tools=$("$repo/image/tools.sh" --out "$out" --mirror "$MIRROR") || die "cannot prepare the trixie tools tree (see above)"
# tools_run CMD...: runs CMD in the tools tree with the work folder at /work,
# in a mount namespace of its own (no mount outlives it; no loop devices).
tools_run() {
    unshare --mount --propagation private -- /bin/bash -c '
        set -e
        tools=$1 work=$2
        shift 2
        mount --bind "$work" "$tools/work"
        mount --rbind /dev "$tools/dev"
        mount -t proc proc "$tools/proc"
        exec chroot "$tools" "$@"' tools_run "$tools" "$work" "$@"
}

# The UKI carries the kernel and the initrd; the slot does not need them.
uki_in="$work/uki-in"
mkdir -p "$uki_in"
mv "$rootfs/boot/vmlinuz-$kernel" "$uki_in/vmlinuz"
mv "$rootfs/boot/initrd.img-$kernel" "$uki_in/initrd.img"
rm -f "$rootfs/boot/System.map-$kernel" "$rootfs/boot/config-$kernel"
used_mib=$(du -sm --apparent-size --exclude=./var "$rootfs" | cut -f1)

slot_bytes=$((SLOT_MIB * 1024 * 1024))
# dm-verity with 4 KiB blocks and SHA-256 needs 1/127 of the data; 1/96 and
# whole MiB leave room.
hash_mib=$(((SLOT_MIB + 95) / 96))
[ "$hash_mib" -ge 16 ] || hash_mib=16
hash_bytes=$((hash_mib * 1024 * 1024))
esp_mib=512
esp_bytes=$((esp_mib * 1024 * 1024))
defs="$work/repart.d"
mkdir -p "$defs"
for def in "$repo"/image/repart/*.conf; do
    sed -e "s/@VERSION@/$IMAGE_VERSION/g" -e "s/@SLOT_BYTES@/$slot_bytes/g" \
        -e "s/@HASH_BYTES@/$hash_bytes/g" -e "s/@ESP_BYTES@/$esp_bytes/g" "$def" >"$defs/$(basename "$def")"
done
seed=$(echo "$name $IMAGE_VERSION $SOURCE_DATE_EPOCH" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')
raw="$work/$name.raw"

note "slot A: erofs of ${used_mib} MiB of files in a ${SLOT_MIB} MiB slot, ${hash_mib} MiB of dm-verity hashes (systemd-repart)"
tools_run env SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" systemd-repart --empty=create --size=auto --dry-run=no \
    --offline=yes --no-pager --json=short --seed="$seed" --root=/work/rootfs --copy-source=/work/rootfs \
    --definitions=/work/repart.d --defer-partitions=esp "/work/$name.raw" \
    >"$work/repart-slots.json" 2>"$work/repart-slots.log" || {
    tail -20 "$work/repart-slots.log" >&2
    die "systemd-repart could not write the root slot (is SLOT_MIB=$SLOT_MIB in $variant_file large enough for ${used_mib} MiB?)"
}
read -r roothash data_uuid hash_uuid < <(python3 - "$work/repart-slots.json" "$IMAGE_VERSION" <<'PY'
import json, sys
parts = json.load(open(sys.argv[1]))
data = next(p for p in parts if p.get("label") == f"tinybox_{sys.argv[2]}_r")
verity = next(p for p in parts if p.get("label") == f"tinybox_{sys.argv[2]}_v")
print(data["roothash"], data["uuid"], verity["uuid"])
PY
) || die "systemd-repart reported no root hash for slot A (see $work/repart-slots.json)"
[[ "$roothash" =~ ^[0-9a-f]{64}$ ]] || die "systemd-repart gave no usable root hash ('$roothash')"
slot_done=$(date +%s)
# Everything the slot needs from the tree is in the disk image now.
os_release=$(cat "$rootfs/usr/lib/os-release")
if [ "$keep_rootfs" = 1 ]; then
    mv "$rootfs" "$work/rootfs-tree"
else
    rm -rf --one-file-system "$rootfs"
fi
mkdir -p "$rootfs/usr/lib"
printf '%s\n' "$os_release" >"$rootfs/usr/lib/os-release"

# The UKI: kernel, initrd and a command line that names this slot's root hash
# and partitions, so it boots this slot and no other. Profile 1 adds
# systemd.factory_reset=1 (a one-shot boot into it erases the state partition).
cmdline="root=/dev/mapper/root rootfstype=erofs ro roothash=$roothash"
cmdline+=" systemd.verity_root_data=PARTUUID=$data_uuid systemd.verity_root_hash=PARTUUID=$hash_uuid"
cmdline+=" systemd.gpt_auto=0 console=tty0 console=ttyS0,115200 systemd.show_status=auto"
uki="tinybox_$IMAGE_VERSION.efi"
note "UKI $uki (ukify, signed for Secure Boot)"
{
    tools_run ukify build --profile="$(printf 'ID=tinybox\nTITLE=tinybox %s' "$IMAGE_VERSION")" \
        --output=/work/uki-in/profile0.efi &&
    tools_run ukify build \
        --profile="$(printf 'ID=factory-reset\nTITLE=tinybox %s: factory reset (erases the state partition)' "$IMAGE_VERSION")" \
        --cmdline="$cmdline systemd.factory_reset=1" --output=/work/uki-in/profile1.efi &&
    tools_run ukify build --linux=/work/uki-in/vmlinuz --initrd=/work/uki-in/initrd.img --uname="$kernel" \
        --os-release=@/work/rootfs/usr/lib/os-release --cmdline="$cmdline" \
        --join-profile=/work/uki-in/profile0.efi --join-profile=/work/uki-in/profile1.efi \
        --secureboot-private-key=/work/secureboot/db.key --secureboot-certificate=/work/secureboot/db.crt \
        --output="/work/uki-in/$uki"
} >"$work/ukify.log" 2>&1 || { tail -20 "$work/ukify.log" >&2; die "ukify could not build the UKI"; }
uki_bytes=$(stat -c %s "$uki_in/$uki")
[ $((3 * uki_bytes + 32 * 1024 * 1024)) -le "$esp_bytes" ] ||
    die "the UKI is $((uki_bytes / 1048576)) MiB: three of them do not fit the ${esp_mib} MiB EFI system partition"

# The EFI system partition's files, then the partition itself (repart's second pass).
esp="$work/esp"
mkdir -p "$esp/EFI/BOOT" "$esp/EFI/systemd" "$esp/EFI/Linux" "$esp/loader" "$esp/tinybox"
tools_run sbsign --key /work/secureboot/db.key --cert /work/secureboot/db.crt \
    --output /work/esp/EFI/systemd/systemd-bootx64.efi /usr/lib/systemd/boot/efi/systemd-bootx64.efi \
    >"$work/sbsign.log" 2>&1 || { cat "$work/sbsign.log" >&2; die "cannot sign systemd-boot"; }
cp "$esp/EFI/systemd/systemd-bootx64.efi" "$esp/EFI/BOOT/BOOTX64.EFI"
mv "$uki_in/$uki" "$esp/EFI/Linux/$uki"
# No menu and no command-line editor: the UKI's own command line is the only one.
printf 'timeout 0\nconsole-mode keep\neditor no\n' >"$esp/loader/loader.conf"
cat >"$esp/tinybox/README.txt" <<'EOF'
Put SSH public keys for root into a file named authorized_keys in this folder
before the first boot; the first boot installs them as /root/.ssh/authorized_keys.
EOF
openssl x509 -in "$sb/db.crt" -outform DER -out "$esp/tinybox/secureboot-db.cer"
tools_run env SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" systemd-repart --dry-run=no --offline=yes --no-pager \
    --json=short --seed="$seed" --root=/work/rootfs --copy-source=/work/esp --definitions=/work/repart.d \
    "/work/$name.raw" >"$work/repart-esp.json" 2>"$work/repart-esp.log" ||
    { tail -20 "$work/repart-esp.log" >&2; die "systemd-repart could not write the EFI system partition"; }
tools_run sbverify --cert /work/secureboot/db.crt "/work/esp/EFI/Linux/$uki" >/dev/null 2>&1 ||
    die "the UKI's Secure Boot signature does not verify against the build's certificate"
if [ "$keep_rootfs" = 1 ]; then
    # The kept tree is as the customize hook left it: kernel and initrd in /boot.
    cp "$uki_in/vmlinuz" "$work/rootfs-tree/boot/vmlinuz-$kernel"
    cp "$uki_in/initrd.img" "$work/rootfs-tree/boot/initrd.img-$kernel"
    mkdir "$work/rootfs-tree.build"
    for f in packages release-dates wheels.manifest dkms.manifest; do
        [ ! -f "$work/$f" ] || cp "$work/$f" "$work/rootfs-tree.build/$f"
    done
fi
rm -rf "$uki_in"

# --- Update files of this version (what systemd-sysupdate reads) ------------

table=$(sfdisk -J "$raw") || die "the disk image has no readable partition table"
# part_field LABEL FIELD: start, size or uuid of the partition named LABEL.
part_field() { jq -r --arg l "$1" ".partitiontable.partitions[] | select(.name == \$l) | .$2" <<<"$table" | head -1; }
update="$work/$name.update"
mkdir -p "$update"
note "update files (xz): the slot's root and hash partitions and the UKI"
for kind in r:root v:root-verity; do
    label="tinybox_${IMAGE_VERSION}_${kind%%:*}"
    start=$(part_field "$label" start) size=$(part_field "$label" size)
    uuid=$(part_field "$label" uuid | tr 'A-F' 'a-f')
    [ -n "$start" ] && [ -n "$size" ] || die "the disk image has no partition $label"
    dd if="$raw" bs=1M iflag=skip_bytes,count_bytes skip=$((start * 512)) count=$((size * 512)) status=none |
        xz -T0 -1 --check=crc32 >"$update/tinybox_${IMAGE_VERSION}_$uuid.${kind#*:}.raw.xz"
done
cp "$esp/EFI/Linux/$uki" "$update/$uki"
(cd "$update" && sha256sum -- * >SHA256SUMS)
gpg_q "${gpg_sign_args[@]}" --local-user "$signing_fpr" --detach-sign --output "$update/SHA256SUMS.gpg" "$update/SHA256SUMS" \
    2>"$work/gpg-sign.log" || { cat "$work/gpg-sign.log" >&2; die "cannot sign the update files' SHA256SUMS"; }
gpgv --keyring "$work/import-pubring.gpg" "$update/SHA256SUMS.gpg" "$update/SHA256SUMS" >"$work/gpgv.log" 2>&1 ||
    { cat "$work/gpgv.log" >&2; die "SHA256SUMS.gpg does not verify against the slot's import-pubring.gpg"; }
stop_gpg_agent
rm -rf "$esp"

# --- Compressed copy, block map, manifest, checksums ------------------------

note "compressing (zstd)"
zstd -q -T0 -10 --long=27 "$raw" -o "$raw.zst"
bmaptool -q create -o "$work/$name.bmap" "$raw"

manifest="$work/$name.manifest"
erofs_mib=$(python3 - "$raw" "$(($(part_field "tinybox_${IMAGE_VERSION}_r" start) * 512))" <<'PY2'
import struct, sys
with open(sys.argv[1], "rb") as f:
    f.seek(int(sys.argv[2]) + 1024)
    sb = f.read(128)
magic, = struct.unpack_from("<I", sb, 0)
if magic != 0xE0F5E1E2:
    sys.exit("no erofs superblock in the root slot")
blkszbits = sb[12]
blocks, = struct.unpack_from("<I", sb, 36)
print((blocks << blkszbits) // (1024 * 1024))
PY2
) || die "cannot read the erofs superblock of the root slot"
write_manifest "$manifest" \
    "image-version: $IMAGE_VERSION" "image-id: tinybox" "roothash: $roothash" \
    "root-partuuid: $data_uuid" "root-verity-partuuid: $hash_uuid" \
    "raw-bytes: $(stat -c %s "$raw")" "esp-mib: $esp_mib" "slot-mib: $SLOT_MIB" "slot-hash-mib: $hash_mib" \
    "slot-used-mib: $erofs_mib" "rootfs-files-mib: $used_mib" "uki: $uki" "uki-bytes: $uki_bytes" \
    "uki-cmdline: $cmdline" "secure-boot: $secureboot" "secure-boot-cert-sha256: $secureboot_sha256" \
    "update-signing-key: $update_signing" ${rebuilt:+"$rebuilt"}

(cd "$work" && sha256sum "$name.raw" "$name.raw.zst" "$name.bmap" "$name.manifest" >"$name.SHA256SUMS")
cp "$sb/db.crt" "$work/$name.secureboot.crt"
cp "$work/import-pubring.gpg" "$work/$name.update-signing.gpg"

rm -rf --one-file-system "${out:?}/$name.update"
for f in "$name.raw" "$name.raw.zst" "$name.bmap" "$name.manifest" "$name.SHA256SUMS" "$name.secureboot.crt" \
    "$name.update-signing.gpg" "$name.update"; do
    mv -f "$work/$f" "$out/$f"
done
if [ "$keep_rootfs" = 1 ]; then
    rm -rf --one-file-system "${out:?}/$name.rootfs-tree" "$out/$name.rootfs-tree.build"
    mv "$work/rootfs-tree" "$out/$name.rootfs-tree"
    mv "$work/rootfs-tree.build" "$out/$name.rootfs-tree.build"
fi

finished=$(date +%s)
raw_bytes=$(stat -c %s "$out/$name.raw")
zst_bytes=$(stat -c %s "$out/$name.raw.zst")
update_bytes=$(du -cb "$out/$name.update"/*.xz "$out/$name.update/$uki" | tail -1 | cut -f1)
note "built $out/$name.raw, OS version $IMAGE_VERSION, in $((finished - started)) s (root filesystem $((rootfs_done - started)) s, slot $((slot_done - rootfs_done)) s)"
note "raw $((raw_bytes / 1024 / 1024)) MiB ($(du -m "$out/$name.raw" | cut -f1) MiB allocated), zstd $((zst_bytes / 1024 / 1024)) MiB"
note "slot ${SLOT_MIB} MiB holding ${erofs_mib} MiB of erofs; UKI $((uki_bytes / 1024 / 1024)) MiB; update files $((update_bytes / 1024 / 1024)) MiB in $out/$name.update/"
note "Secure Boot: $secureboot"
note "update signing key: $update_signing"
[ "$keep_rootfs" = 0 ] || note "kept the root filesystem tree in $out/$name.rootfs-tree/ (for --from-rootfs)"
printf 'build_s=%s\nrootfs_s=%s\nslot_s=%s\nraw_bytes=%s\nzst_bytes=%s\nslot_mib=%s\nslot_used_mib=%s\nuki_bytes=%s\nupdate_bytes=%s\n' \
    "$((finished - started))" "$((rootfs_done - started))" "$((slot_done - rootfs_done))" "$raw_bytes" "$zst_bytes" \
    "$SLOT_MIB" "$erofs_mib" "$uki_bytes" "$update_bytes" >"$out/$name.build-stats"
