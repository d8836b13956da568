#!/bin/bash
# Prints the path of a Debian 13 (trixie) tools tree that image/build.sh runs
# systemd-repart, ukify, mkfs.erofs and sbsign from: bookworm's systemd 252
# predates repart's offline mode and UKI profiles. The tree is built once with
# mmdebstrap and kept under OUT/.tools/, named after a hash of its package
# list, so a changed list makes a new tree.
#
#   image/tools.sh --out DIR [--mirror URL]
set -euo pipefail

out=""
mirror=${MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift 2 ;;
    *) echo "image/tools.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || { echo "image/tools.sh: --out is required" >&2; exit 2; }

packages="systemd systemd-repart systemd-ukify systemd-boot-efi systemd-boot-tools
          erofs-utils dosfstools mtools e2fsprogs fdisk xz-utils zstd sbsigntool openssl
          python3-pefile gnupg libcryptsetup12"
list=$(echo "$packages" | tr -s ' \n' '\n' | sed '/^$/d' | sort | tr '\n' ',' | sed 's/,$//')
key=$(echo "trixie $list" | sha256sum | cut -c1-12)
tree="$out/.tools/trixie-$key"
if [ -x "$tree/usr/bin/systemd-repart" ] && [ -f "$tree/.complete" ]; then
    echo "$tree"
    exit 0
fi

mkdir -p "$out/.tools"
rm -rf --one-file-system "$tree" "$tree.part"
echo "image: building the trixie tools tree (repart, ukify, mkfs.erofs, sbsign) in $tree" >&2
mmdebstrap --mode=root --variant=apt --include="$list" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    trixie "$tree.part" "deb $mirror trixie main" >"$out/.tools/build-$key.log" 2>&1 || {
    tail -20 "$out/.tools/build-$key.log" >&2
    echo "image/tools.sh: cannot build the trixie tools tree (log: $out/.tools/build-$key.log)" >&2
    exit 1
}
mkdir -p "$tree.part/work"
touch "$tree.part/.complete"
mv "$tree.part" "$tree"
# Older trees of another package list are no longer used.
find "$out/.tools" -mindepth 1 -maxdepth 1 -type d -name 'trixie-*' ! -name "trixie-$key" -exec rm -rf --one-file-system {} +
echo "$tree"
