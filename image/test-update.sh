#!/bin/bash
# Updates the cpu image under QEMU (TCG, 2 GiB, OVMF with its variables kept
# across boots, systemd-boot) from signed update files served by the host, and
# checks that a version that fails its boot check is rolled back. v1 is the
# flashed image; v2 and v3 are built from v1's kept root filesystem tree under
# later versions (image/build.sh --from-rootfs); v3 carries a drop-in that makes
# tinyperf boot-check demand three times the figures of the version before it,
# which an unchanged OS cannot give. The host serves update folders on
# 127.0.0.1 (image/test-update-server.py); the guest reaches them as
# http://10.0.2.100/ through QEMU's guestfwd. Each boot's phase is handed to
# the image's test hook (tinybox-test-phase.service) as the fw_cfg item
# opt/tinybox/phase; the UKIs are booted as they are (type #2 entries), so
# boot counting lives in their file names on the ESP. Boots of one disk:
#   1. v1: GET /api/v1/image names v1; a marker goes to /var; updates from a
#      tampered SHA256SUMS, a file changed after signing and a version without
#      its UKI are refused, slot B stays _empty; an update to v2 is cut off
#      mid-download (QEMU killed);
#   2. v1 again: the update to v2 is written: slot B holds tinybox_V2_{v,r}
#      with the partition UUIDs of v2's root hash, the ESP tinybox_V2+3-0.efi;
#   3. v2 on trial: the marker is kept, the boot check passes and
#      systemd-bless-boot renames the UKI tinybox_V2.efi; v3 is written into
#      v1's slot;
#   4. v3 on trial: its boot check fails, the UKI is marked bad (+0-N) and the
#      box reboots by itself;
#   5. back on v2: the marker is kept, GET /api/v1/image lists v3's rejection
#      and `tinyperf image check` does not offer v3 again.
# Times and sizes go to OUT/result.txt, each boot's console to OUT/serial-*.log.
# QEMU and the server are stopped by their PIDs on every path.
#
#   image/test-update.sh [--image FILE] [--out DIR] [--timeout SECONDS]
#
# The image must have been built with its tree kept (make image VARIANT=cpu
# KEEP_ROOTFS=1); v2 and v3 are signed with the same key as v1 (the throwaway
# key in the image's output folder, or UPDATE_SIGNING_KEY).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
image="$repo/out/image/tinybox-cpu.raw"
out="$repo/out/image-test-update"
timeout_s=600
serial_number=TBTEST0002
grow_by_mib=2048

die() {
    echo "make image-test-update: $*" >&2
    exit 1
}
note() { echo "image-test-update: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --image) image=${2:?--image needs a file}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    -h | --help) sed -n "2,/^set -euo/{/^#/p}" "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

test_started=$(date +%s)
[ "$(id -u)" -eq 0 ] || die "must run as root (it builds two images); try: sudo make image-test-update"
[ -f "$image" ] || die "no image at $image (run: make image VARIANT=cpu KEEP_ROOTFS=1)"
image=$(cd "$(dirname "$image")" && pwd)/$(basename "$image")
image_dir=$(dirname "$image")
name=$(basename "$image" .raw)
manifest="$image_dir/$name.manifest"
tree="$image_dir/$name.rootfs-tree"
[ -f "$manifest" ] || die "no manifest $manifest beside the image"
[ -d "$tree" ] && [ -d "$tree.build" ] ||
    die "no root filesystem tree $tree beside the image (build it with: make image VARIANT=cpu KEEP_ROOTFS=1)"
[ -f "$image_dir/$name.update/SHA256SUMS.gpg" ] ||
    die "$image_dir/$name.update/ has no SHA256SUMS.gpg (an image from before signed updates?)"
"$repo/image/host-deps.sh" test || die "cannot install the test tools (see above)"
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
[ -f "$ovmf_code" ] && [ -f "$ovmf_vars" ] || die "no UEFI firmware at $ovmf_code (apt-get install ovmf)"
for tool in qemu-system-x86_64 curl jq sfdisk mdir nc ss python3 gpg xz; do
    command -v "$tool" >/dev/null || die "missing tool '$tool'"
done

v1=$(sed -n 's/^image-version: //p' "$manifest")
[ -n "$v1" ] || die "$manifest names no image-version"
# v2 and v3 sort after v1: a second and two seconds later for the usual
# YYYYMMDD.HHMMSS, a suffix otherwise.
if [[ "$v1" =~ ^([0-9]{4})([0-9]{2})([0-9]{2})\.([0-9]{2})([0-9]{2})([0-9]{2})$ ]]; then
    t1=$(date -u -d "${BASH_REMATCH[1]}-${BASH_REMATCH[2]}-${BASH_REMATCH[3]} ${BASH_REMATCH[4]}:${BASH_REMATCH[5]}:${BASH_REMATCH[6]}" +%s)
    v2=$(date -u -d "@$((t1 + 1))" +%Y%m%d.%H%M%S)
    v3=$(date -u -d "@$((t1 + 2))" +%Y%m%d.%H%M%S)
else
    v2="$v1.1" v3="$v1.2"
fi
signing=$(sed -n 's/^update-signing-key: //p' "$manifest")
if [[ "$signing" == *"THROWAWAY TEST KEY"* ]] && [ -z "${UPDATE_SIGNING_KEY:-}" ]; then
    signing_key="$image_dir/.update-signing/secret.asc"
else
    signing_key=${UPDATE_SIGNING_KEY:-}
fi
[ -n "$signing_key" ] && [ -f "$signing_key" ] ||
    die "v1 is signed with '$signing' and its key is not here (set UPDATE_SIGNING_KEY= to the key that built $image)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/serial-*.log "$out/result.txt"
work=$(mktemp -d "$out/.run.XXXXXX")
qemu_pid="" server_pid="" gpg_home=""

stop_qemu() {
    [ -n "$qemu_pid" ] || return 0
    if kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        for _ in $(seq 1 20); do
            kill -0 "$qemu_pid" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$qemu_pid" 2>/dev/null; then
            kill -9 "$qemu_pid" 2>/dev/null || true
        fi
    fi
    wait "$qemu_pid" 2>/dev/null || true
    qemu_pid=""
}
stop_server() {
    [ -n "$server_pid" ] || return 0
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    # The nc relays QEMU started end when the server's side closes.
}
cleanup() {
    stop_qemu
    stop_server
    if [ -n "$gpg_home" ]; then
        gpgconf --homedir "$gpg_home" --kill gpg-agent >/dev/null 2>&1 || true
        rm -rf "$gpg_home"
    fi
    for f in "$work"/serial-*.log; do
        [ -f "$f" ] && tr -d '\r' <"$f" >"$out/$(basename "$f")"
    done
    [ ! -f "$work/server.log" ] || cp "$work/server.log" "$out/server.log"
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

failures=0
pass() { echo "  ok    $*"; }
flunk() { echo "  FAIL  $*"; failures=$((failures + 1)); }
results=()
record() { results+=("$1=$2"); }

# --- v2 and v3, from v1's tree ----------------------------------------------

# Each build has an output folder of its own (they are all tinybox-cpu.*) that
# shares the tools tree and the throwaway signing key with v1's.
build_version() {
    local v=$1 dir="$work/build-$1" t0
    shift
    mkdir -p "$dir"
    [ ! -d "$image_dir/.tools" ] || ln -s "$image_dir/.tools" "$dir/.tools"
    t0=$(date +%s)
    UPDATE_SIGNING_KEY=$signing_key IMAGE_VERSION=$v "$repo/image/build.sh" --variant cpu --out "$dir" \
        --from-rootfs "$tree" "$@" >"$out/build-$v.log" 2>&1 ||
        { tail -20 "$out/build-$v.log" >&2; die "cannot build version $v from $tree (log: $out/build-$v.log)"; }
    echo $(($(date +%s) - t0))
}
note "building v2 ($v2) from v1's tree $tree"
build_v2_s=$(build_version "$v2")
note "v2 built in ${build_v2_s} s"
overlay="$work/overlay-v3"
mkdir -p "$overlay/usr/lib/systemd/system/tinyperf-boot-check.service.d"
cat >"$overlay/usr/lib/systemd/system/tinyperf-boot-check.service.d/50-demand.conf" <<'EOF'
# A release that demands three times the figures of the version before it:
# its boot check fails on the same machine.
[Service]
ExecStart=
ExecStart=/usr/bin/tinyperf boot-check --min-ratio 3
EOF
note "building v3 ($v3) from v1's tree, with a boot check that demands 3x"
build_v3_s=$(build_version "$v3" --overlay "$overlay")
note "v3 built in ${build_v3_s} s"
record build_v2_s "$build_v2_s"
record build_v3_s "$build_v3_s"
upd2="$work/build-$v2/$name.update"
upd3="$work/build-$v3/$name.update"
for f in "$upd2" "$upd3"; do
    [ -f "$f/SHA256SUMS.gpg" ] || die "the build left no signed update files in $f"
done
v2_manifest="$work/build-$v2/$name.manifest"
v2_root_uuid=$(sed -n 's/^root-partuuid: //p' "$v2_manifest" | tr 'A-F' 'a-f')
v2_verity_uuid=$(sed -n 's/^root-verity-partuuid: //p' "$v2_manifest" | tr 'A-F' 'a-f')
v3_manifest="$work/build-$v3/$name.manifest"
v3_root_uuid=$(sed -n 's/^root-partuuid: //p' "$v3_manifest" | tr 'A-F' 'a-f')
for f in "$upd2"/*; do
    record "update_file_bytes_$(basename "$f" | sed "s/$v2/V2/; s/_[0-9a-f-]\{36\}\./_UUID./")" "$(stat -c %s "$f")"
done

# --- The update folders the host serves ----------------------------------------

srv="$work/srv"
mkdir -p "$srv"
# good-v2, good-v3: the builds' update files. stall-v2: v2's, cut off by the server.
cp -al "$upd2" "$srv/good-v2"
cp -al "$upd3" "$srv/good-v3"
cp -al "$upd2" "$srv/stall-v2"
# tampered: SHA256SUMS changed after signing (one checksum's first digit).
cp -al "$upd2" "$srv/tampered"
rm "$srv/tampered/SHA256SUMS"
awk 'NR == 1 { $0 = (substr($0, 1, 1) == "0" ? "1" : "0") substr($0, 2) } { print }' "$upd2/SHA256SUMS" >"$srv/tampered/SHA256SUMS"
cmp -s "$srv/tampered/SHA256SUMS" "$upd2/SHA256SUMS" && die "could not change SHA256SUMS for the tampered source"
# wrong-checksum: signed list as built, but the verity file changed after signing
# (still a valid xz stream, so only its checksum can tell).
cp -al "$upd2" "$srv/wrong-checksum"
verity_file=$(cd "$upd2" && ls ./*.root-verity.raw.xz | sed 's|^\./||')
rm "$srv/wrong-checksum/$verity_file"
xz -dc "$upd2/$verity_file" | python3 -c '
import sys
data = bytearray(sys.stdin.buffer.read())
data[4096] ^= 0xff
sys.stdout.buffer.write(data)' | xz -1 --check=crc32 >"$srv/wrong-checksum/$verity_file"
# missing-uki: the two partition files only, listed and signed without the UKI.
mkdir -p "$srv/missing-uki"
for f in "$upd2"/*.raw.xz; do ln "$f" "$srv/missing-uki/"; done
grep -v '\.efi$' "$upd2/SHA256SUMS" >"$srv/missing-uki/SHA256SUMS"
gpg_home=$(mktemp -d /tmp/tinybox-gpg.XXXXXX)
gpg --homedir "$gpg_home" --batch --quiet --import "$signing_key" 2>/dev/null || die "cannot import $signing_key"
gpg --homedir "$gpg_home" --batch --quiet --pinentry-mode loopback \
    --passphrase-file "${UPDATE_SIGNING_PASSPHRASE_FILE:-/dev/null}" --detach-sign \
    --output "$srv/missing-uki/SHA256SUMS.gpg" "$srv/missing-uki/SHA256SUMS" || die "cannot sign the missing-uki list"
gpgconf --homedir "$gpg_home" --kill gpg-agent >/dev/null 2>&1 || true
rm -rf "$gpg_home"
gpg_home=""

free_port() {
    local p
    for p in $(seq "$1" "$2"); do
        if [ -z "$(ss -Hltn "sport = :$p")" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
srv_port=$(free_port 18580 18680) || die "no free TCP port in 18580-18680 on 127.0.0.1"
python3 "$repo/image/test-update-server.py" "$srv" "$srv_port" "$work/server.log" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 1 50); do
    curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$srv_port/good-v2/SHA256SUMS" 2>/dev/null && break
    sleep 0.2
done
curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$srv_port/good-v2/SHA256SUMS" ||
    die "the update server did not start: $(cat "$work/server.err")"
: >"$work/server.log"
port=$(free_port 18470 18570) || die "no free TCP port in 18470-18570 on 127.0.0.1"
base="http://127.0.0.1:$port"

# --- The test disk ---------------------------------------------------------------

disk="$work/disk.raw"
cp --sparse=always "$image" "$disk"
truncate -s "+${grow_by_mib}M" "$disk"
cp "$ovmf_vars" "$work/vars.fd"
table=$(sfdisk -J "$image") || die "$image has no readable partition table"
sector=$(jq -r '.partitiontable.sectorsize // 512' <<<"$table")
esp_start=$(jq -r '.partitiontable.partitions[] | select(.name == "esp") | .start' <<<"$table")
[ -n "$esp_start" ] || die "$image has no partition named esp"
esp="$disk@@$((esp_start * sector))"
export MTOOLS_SKIP_CHECK=1
# esp_ukis: the UKIs on the test disk's ESP.
esp_ukis() { mdir -b -i "$esp" ::/EFI/Linux 2>/dev/null | sed 's|^.*/||' | grep '\.efi$' | sort | tr '\n' ' ' | sed 's/ $//'; }
# part_names: the test disk's GPT names in order; part_uuid LABEL.
part_names() { sfdisk -J "$disk" | jq -r '[.partitiontable.partitions[] | .name] | join(" ")'; }
part_uuid() { sfdisk -J "$disk" | jq -r --arg n "$1" '.partitiontable.partitions[] | select(.name == $n) | .uuid' | tr 'A-F' 'a-f'; }

echo "image-test-update results ($(basename "$image"): v1 $v1, v2 $v2, v3 $v3):"

started=""
elapsed() { echo "$(date +%s.%N) $started" | awk '{ printf "%.1f", $1 - $2 }'; }
# boot PHASE: QEMU on the test disk with the kept UEFI variables and the phase
# in fw_cfg; the console goes to serial-PHASE.log. -no-reboot: a reboot or a
# power-off ends QEMU.
boot() {
    serial="$work/serial-$1.log"
    http_s="" http_version="" complete_s=""
    started=$(date +%s.%N)
    qemu-system-x86_64 \
        -machine q35 -accel tcg -cpu max -smp 2 -m 2048 \
        -drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf_code" \
        -drive "if=pflash,format=raw,unit=1,file=$work/vars.fd" \
        -display none -monitor none -serial "file:$serial" -no-reboot \
        -smbios "type=1,serial=$serial_number" \
        -fw_cfg "name=opt/tinybox/phase,string=$1" \
        -drive "file=$disk,format=raw,if=virtio,cache=unsafe" \
        -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:8470,guestfwd=tcp:10.0.2.100:80-cmd:nc 127.0.0.1 $srv_port" \
        -device virtio-net-pci,netdev=n0 \
        </dev/null >"$work/qemu-$1.log" 2>&1 &
    qemu_pid=$!
}
guest() { tr -d "\r" 2>/dev/null <"$work/serial-$1.log" | sed -n "s/^.*TINYBOX-TEST //p"; }
info() { guest "$1" | sed -n "s/^info $2=//p" | head -1; }
verdicts() {
    local verdict detail
    while read -r verdict detail; do
        case "$verdict" in
        ok) pass "guest ($1): $detail" ;;
        FAIL) flunk "guest ($1): $detail" ;;
        esac
    done < <(guest "$1")
}
# poll PHASE: one look at the running guest: GET /api/v1/image (the latest
# answer is kept; the time of the first and the version it names) and the
# boot's completion line on the console.
poll() {
    if curl -fsS -m 5 -o "$work/image-$1.json.part" "$base/api/v1/image" 2>/dev/null; then
        mv "$work/image-$1.json.part" "$work/image-$1.json"
    fi
    if [ -z "$http_s" ] && [ -s "$work/image-$1.json" ]; then
        http_s=$(elapsed)
        http_version=$(jq -r '.version // empty' "$work/image-$1.json" 2>/dev/null || true)
        note "boot $1: the agent answered HTTP ${http_s} s after QEMU started, version ${http_version:-unknown}"
    fi
    if [ -z "$complete_s" ] && guest "$1" | grep -q '^info boot_complete_uptime_s='; then
        complete_s=$(elapsed)
        note "boot $1: boot-complete.target reached and the boot blessed ${complete_s} s after QEMU started"
    fi
}
# wait_exit PHASE SECONDS: until QEMU ends (the guest powered off or rebooted).
wait_exit() {
    local deadline=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        poll "$1"
        if ! kill -0 "$qemu_pid" 2>/dev/null; then
            wait "$qemu_pid" 2>/dev/null || true
            qemu_pid=""
            exit_s=$(elapsed)
            return 0
        fi
        sleep 2
    done
    exit_s=""
    return 1
}
check_http_version() {
    if [ "$http_version" = "$2" ]; then
        pass "boot $1: GET /api/v1/image names version $2 (${http_s} s after QEMU started)"
    else
        flunk "boot $1: GET /api/v1/image names version '${http_version:-no answer}' (want $2)"
    fi
    record "boot_${1//-/_}_qemu_to_http_s" "${http_s:-none}"
}
check_result() {
    if guest "$1" | grep -qx 'result=pass'; then
        return 0
    elif guest "$1" | grep -q '^result='; then
        flunk "guest ($1): $(guest "$1" | grep '^result=' | tail -1)"
    else
        flunk "guest ($1): the test hook did not finish (last: $(guest "$1" | tail -1))"
    fi
}

# --- Boot 1: v1, refused updates, an update cut off ---------------------------------

note "boot 1 (v1 $v1): three broken update sources, then an update cut off mid-download"
boot v1-refuse
stalled=""
deadline=$(($(date +%s) + timeout_s))
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$qemu_pid" 2>/dev/null; do
    poll v1-refuse
    stalled=$(grep -m1 '^STALL /stall-v2/' "$work/server.log" || true)
    [ -z "$stalled" ] || break
    sleep 2
done
if [ -n "$stalled" ]; then
    # The root file is partly written to slot B; the power goes.
    sleep 1
    kill -9 "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
    qemu_pid=""
    note "boot 1: QEMU killed $(elapsed) s after it started, with $(awk '{ print $3 }' <<<"$stalled") bytes of v2's root file sent"
    pass "update to v2 cut off mid-download: QEMU killed after $(awk '{ printf "%.0f MiB", $3 / 1048576 }' <<<"$stalled") of $(basename "$(awk '{ print $2 }' <<<"$stalled")")"
else
    flunk "boot 1: the guest never got to the cut-off update within ${timeout_s} s (last: $(guest v1-refuse | tail -1))"
    stop_qemu
fi
record boot_v1_refuse_total_s "$(elapsed)"
check_http_version v1-refuse "$v1"
verdicts v1-refuse
check_result v1-refuse
names=$(part_names)
if [ "$names" = "esp tinybox_${v1}_v tinybox_${v1}_r _empty _empty var" ]; then
    pass "after the cut-off update slot B is still _empty: $names"
else
    note "after the cut-off update the partitions are: $names"
fi

# --- Boot 2: v1 again, v2 written -----------------------------------------------------

note "boot 2 (v1 again): the update to v2"
boot v1-update
wait_exit v1-update "$timeout_s" || { flunk "boot 2 did not power off within ${timeout_s} s (last: $(guest v1-update | tail -1))"; stop_qemu; }
record boot_v1_update_total_s "${exit_s:-none}"
check_http_version v1-update "$v1"
verdicts v1-update
check_result v1-update
update_s=$(info v1-update update_v2_s)
record update_write_v2_s "${update_s:-none}"
note "update to v2 written in ${update_s:-?} s"
names=$(part_names)
want="esp tinybox_${v1}_v tinybox_${v1}_r tinybox_${v2}_v tinybox_${v2}_r var"
if [ "$names" = "$want" ]; then
    pass "slot B holds v2: $names"
else
    flunk "partitions after the update to v2: '$names' (want '$want')"
fi
if [ "$(part_uuid "tinybox_${v2}_r")" = "$v2_root_uuid" ] && [ "$(part_uuid "tinybox_${v2}_v")" = "$v2_verity_uuid" ]; then
    pass "v2's partitions carry the UUIDs of its root hash ($v2_root_uuid, $v2_verity_uuid)"
else
    flunk "v2's partition UUIDs $(part_uuid "tinybox_${v2}_r") $(part_uuid "tinybox_${v2}_v"), want $v2_root_uuid $v2_verity_uuid"
fi
ukis=$(esp_ukis)
if [[ " $ukis " == *" tinybox_${v2}+3-0.efi "* ]] && [[ " $ukis " == *" tinybox_${v1}.efi "* ]]; then
    pass "ESP: $ukis"
else
    flunk "ESP after the update to v2: '$ukis' (want tinybox_${v1}.efi and tinybox_${v2}+3-0.efi)"
fi

# --- Boot 3: v2 on trial, kept; v3 written ------------------------------------------------

note "boot 3 (v2 on trial): the boot check, then the update to v3"
boot v2
wait_exit v2 "$timeout_s" || { flunk "boot 3 did not power off within ${timeout_s} s (last: $(guest v2 | tail -1))"; stop_qemu; }
record boot_v2_total_s "${exit_s:-none}"
record boot_v2_qemu_to_blessed_s "${complete_s:-none}"
check_http_version v2 "$v2"
verdicts v2
check_result v2
info v2 boot_check_log | sed 's/^/  note  v2 boot check: /'
record update_write_v3_s "$(info v2 update_v3_s)"
blessed=$(info v2 esp_blessed)
if [[ " $blessed " == *" tinybox_${v2}.efi "* ]]; then
    pass "v2 blessed: the ESP held tinybox_${v2}.efi before v3 came ($blessed)"
else
    flunk "v2 not blessed: the ESP held '$blessed' once the boot was complete"
fi
ukis=$(esp_ukis)
if [[ " $ukis " == *" tinybox_${v2}.efi "* ]] && [[ " $ukis " == *" tinybox_${v3}+3-0.efi "* ]] && [[ " $ukis " != *" tinybox_${v1}.efi "* ]]; then
    pass "ESP after shutdown: $ukis (v2 blessed, v3 on trial, v1 gone)"
else
    flunk "ESP after the update to v3: '$ukis' (want tinybox_${v2}.efi and tinybox_${v3}+3-0.efi, no v1)"
fi
names=$(part_names)
want="esp tinybox_${v3}_v tinybox_${v3}_r tinybox_${v2}_v tinybox_${v2}_r var"
if [ "$names" = "$want" ] && [ "$(part_uuid "tinybox_${v3}_r")" = "$v3_root_uuid" ]; then
    pass "v3 went into v1's old slot: $names"
else
    flunk "partitions after the update to v3: '$names' (want '$want' with v3's root UUID $v3_root_uuid)"
fi

# --- Boot 4: v3 on trial, rejected ------------------------------------------------------

note "boot 4 (v3 on trial): its boot check fails and it reboots by itself"
boot v3
if wait_exit v3 "$timeout_s"; then
    pass "boot 4: v3 rebooted by itself ${exit_s} s after QEMU started"
else
    flunk "boot 4: v3 did not reboot within ${timeout_s} s (last: $(guest v3 | tail -1))"
    stop_qemu
fi
record boot_v3_total_s "${exit_s:-none}"
record boot_v3_qemu_to_http_s "${http_s:-none}"
[ "${http_version:-}" != "$v3" ] || pass "boot 4: v3 ran (its agent answered HTTP after ${http_s} s)"
info v3 boot_check_log | sed 's/^/  note  v3 boot check: /'
ukis=$(esp_ukis)
if [[ " $ukis " =~ \ tinybox_${v3}\+0-[0-9]+\.efi\  ]] && [[ " $ukis " == *" tinybox_${v2}.efi "* ]]; then
    pass "v3 marked bad on the ESP: $ukis"
else
    flunk "ESP after v3's boot: '$ukis' (want tinybox_${v3}+0-N.efi beside tinybox_${v2}.efi)"
fi

# --- Boot 5: back on v2 -----------------------------------------------------------------

note "boot 5: back on v2"
boot back
wait_exit back "$timeout_s" || { flunk "boot 5 did not power off within ${timeout_s} s (last: $(guest back | tail -1))"; stop_qemu; }
record boot_back_total_s "${exit_s:-none}"
check_http_version back "$v2"
verdicts back
check_result back
rejected=$(jq -c '.rejections[0] // empty' "$work/image-back.json" 2>/dev/null || true)
if [ "$(jq -r '.rejections[0].version // empty' "$work/image-back.json" 2>/dev/null || true)" = "$v3" ]; then
    pass "GET /api/v1/image: rejections[0] = $rejected"
else
    flunk "GET /api/v1/image lists no rejection of $v3: $(jq -c '{rejections, rollbacks_total, update}' "$work/image-back.json" 2>/dev/null || echo none)"
fi
check=$(info back image_check)
if [ -n "$check" ] && ! jq -e --arg v "$v3" '[.. | objects | select(.version? == $v) | (.state // .status // .mark // "")] | any(. == "newer")' <<<"$check" >/dev/null 2>&1; then
    pass "tinyperf image check does not offer $v3: $(info back image_check_text)"
else
    flunk "tinyperf image check: '$check' (v3 must not be offered as newer)"
fi
[ "$(info back marker)" = "$(info v1-refuse marker)" ] && [ -n "$(info back marker)" ] &&
    pass "marker $(info back marker) written on v1 still there on v2" ||
    flunk "marker on v2 after the rollback: '$(info back marker)' (written on v1: '$(info v1-refuse marker)')"

total_s=$(($(date +%s) - test_started))
{
    echo "image=$image"
    echo "v1=$v1"
    echo "v2=$v2"
    echo "v3=$v3"
    printf '%s\n' "${results[@]}"
    echo "total_s=$total_s"
    echo "failures=$failures"
} >"$out/result.txt"
note "whole test ${total_s} s; results in $out/result.txt, consoles in $out/serial-*.log"
if [ "$failures" -gt 0 ]; then
    die "$failures check(s) failed"
fi
note "pass"
