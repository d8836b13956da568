#!/bin/bash
# Boots the tinybox image under QEMU (TCG, 2 GiB, OVMF with its variables
# kept across boots, systemd-boot) and checks it from the host and, through
# tinybox-selftest.service on the serial console, from inside. Boots of one
# test copy of the disk, grown by 2 GiB:
#   1. first boot (self-test entry): the agent answers GET /api/v1/status on a
#      host port bound to 127.0.0.1, HTTP writes without the token are refused,
#      the boot suite ran; inside: the agent unit, a D-Bus run, the identity
#      (hostname from the SMBIOS serial, machine-id, token 0640, SSH keys), the
#      root read-only from /dev/mapper/root with dm-verity, a write to /usr
#      refused, apt refusing to install, /etc an overlay, the state partition
#      `var` created at first boot in the added space; a marker is written there;
#   2. second boot: the marker, the machine-id and the token are kept; the
#      self-test asks for a factory reset over HTTP and the box reboots;
#   3. the factory-reset boot (the one-shot entry the agent's request set);
#   4. after the reset: the marker is gone, a new machine-id and token, the
#      same OS version.
# Then a copy of the flashed image with bytes flipped in the root slot's data
# must not run the agent: the console shows dm-verity's error.
# The partition table is checked from the host. QEMU is killed by its PID on
# every path; nothing is left running.
#
#   image/test.sh [--image FILE] [--out DIR] [--timeout SECONDS]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
image="$repo/out/image/tinybox-cpu.raw"
out="$repo/out/image-test"
timeout_s=540
serial_number=TBTEST0001
grow_by_mib=2048

die() {
    echo "make image-test: $*" >&2
    exit 1
}
note() { echo "image-test: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --image) image=${2:?--image needs a file}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    -h | --help) sed -n "2,/^set -euo/{/^#/p}" "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

[ -f "$image" ] || die "no image at $image (run: make image)"
manifest="${image%.raw}.manifest"
[ -f "$manifest" ] || die "no manifest $manifest beside the image"
"$repo/image/host-deps.sh" test || die "cannot install the test tools (see above)"
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
[ -f "$ovmf_code" ] && [ -f "$ovmf_vars" ] || die "no UEFI firmware at $ovmf_code (apt-get install ovmf)"
for tool in qemu-system-x86_64 curl jq sfdisk mtype mcopy mdir ss; do
    command -v "$tool" >/dev/null || die "missing tool '$tool'"
done

version=$(sed -n 's/^image-version: //p' "$manifest")
cmdline=$(sed -n 's/^uki-cmdline: //p' "$manifest")
uki=$(sed -n 's/^uki: //p' "$manifest")
[ -n "$version" ] && [ -n "$cmdline" ] && [ -n "$uki" ] ||
    die "$manifest names no image-version, uki or uki-cmdline (an image from before the A/B layout?)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.run.XXXXXX")
qemu_pid=""

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
cleanup() {
    stop_qemu
    for f in "$work"/serial-*.log; do
        [ -f "$f" ] && tr -d '\r' <"$f" >"$out/$(basename "$f")"
    done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

failures=0
pass() { echo "  ok    $*"; }
flunk() { echo "  FAIL  $*"; failures=$((failures + 1)); }

# --- The test copy: larger, with a self-test boot entry ----------------------

disk="$work/disk.raw"
cp --sparse=always "$image" "$disk"
image_bytes=$(stat -c %s "$image")
truncate -s "+${grow_by_mib}M" "$disk"
cp "$ovmf_vars" "$work/vars.fd"

table=$(sfdisk -J "$image") || die "$image has no readable partition table"
sector=$(jq -r '.partitiontable.sectorsize // 512' <<<"$table")
part() { jq -r --arg n "$1" ".partitiontable.partitions[] | select(.name == \$n) | .$2" <<<"$table" | head -1; }
esp_start=$(part esp start)
[ -n "$esp_start" ] || die "$image has no partition named esp"
esp="$disk@@$((esp_start * sector))"
export MTOOLS_SKIP_CHECK=1

echo "image-test results ($(basename "$image"), OS version $version):"
# The flashed layout: the ESP, slot A (hash, root) with this version, slot B
# empty, both slots of the same size; the state partition comes at first boot.
names=$(jq -r '[.partitiontable.partitions[] | .name] | join(" ")' <<<"$table")
want="esp tinybox_${version}_v tinybox_${version}_r _empty _empty"
if [ "$names" = "$want" ] && [ "$(jq '[.partitiontable.partitions[] | select(.name == "_empty")] | length' <<<"$table")" = 2 ]; then
    a_size=$(part "tinybox_${version}_r" size)
    b_size=$(jq -r '[.partitiontable.partitions[] | select(.name == "_empty")][1].size' <<<"$table")
    if [ "$a_size" = "$b_size" ]; then
        pass "partition table: $names; slots of $((a_size * sector / 1048576)) MiB each"
    else
        flunk "slot A has $a_size sectors, slot B $b_size"
    fi
else
    flunk "partition table: '$names' (want '$want')"
fi
if mdir -b -i "$esp" ::/EFI/Linux 2>/dev/null | grep -q "/$uki\$"; then
    pass "ESP holds /EFI/Linux/$uki"
else
    flunk "ESP has no /EFI/Linux/$uki: $(mdir -b -i "$esp" ::/EFI/Linux 2>&1 | tr '\n' ' ')"
fi

# set_phase PHASE: the self-test entry (the UKI with its own command line plus
# the self-test units) becomes the default.
set_phase() {
    cat >"$work/selftest.conf" <<ENTRY
title   tinybox $version (self-test, $1)
efi     /EFI/Linux/$uki
options $cmdline systemd.wants=tinybox-selftest-config.service systemd.wants=tinybox-selftest.service tinybox.selftest=$1
ENTRY
    printf 'default selftest.conf\ntimeout 0\neditor no\n' >"$work/loader.conf"
    mcopy -o -i "$esp" "$work/selftest.conf" ::/loader/entries/selftest.conf
    mcopy -o -i "$esp" "$work/loader.conf" ::/loader/loader.conf
}
mmd -i "$esp" ::/loader/entries 2>/dev/null || true

port=""
for p in $(seq 18470 18570); do
    if [ -z "$(ss -Hltn "sport = :$p")" ]; then
        port=$p
        break
    fi
done
[ -n "$port" ] || die "no free TCP port in 18470-18570 on 127.0.0.1"
base="http://127.0.0.1:$port"

started=""
elapsed() { echo "$(date +%s.%N) $started" | awk '{ printf "%.1f", $1 - $2 }'; }
# boot NAME DISK: starts QEMU on DISK with the kept UEFI variables; the guest's
# console goes to serial-NAME.log. -no-reboot: a reboot ends QEMU.
boot() {
    serial="$work/serial-$1.log"
    started=$(date +%s.%N)
    qemu-system-x86_64 \
        -machine q35 -accel tcg -cpu max -smp 2 -m 2048 \
        -drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf_code" \
        -drive "if=pflash,format=raw,unit=1,file=$work/vars.fd" \
        -display none -monitor none -serial "file:$serial" -no-reboot \
        -smbios "type=1,serial=$serial_number" \
        -drive "file=$2,format=raw,if=virtio,cache=unsafe" \
        -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:8470" \
        -device virtio-net-pci,netdev=n0 \
        </dev/null >"$work/qemu-$1.log" 2>&1 &
    qemu_pid=$!
}
# The console is shared with getty, whose login prompt can precede a line unterminated.
selftest() { tr -d "\r" 2>/dev/null <"$work/serial-$1.log" | sed -n "s/^.*TINYBOX-SELFTEST //p"; }
info() { selftest "$1" | sed -n "s/^info $2=//p" | head -1; }
# verdicts NAME: the guest's own ok/FAIL lines, and its result.
verdicts() {
    local verdict detail
    while read -r verdict detail; do
        case "$verdict" in
        ok) pass "guest ($1): $detail" ;;
        FAIL) flunk "guest ($1): $detail" ;;
        esac
    done < <(selftest "$1")
    if ! selftest "$1" | grep -q '^result='; then
        flunk "guest ($1): the self-test did not finish (last: $(selftest "$1" | tail -1))"
    elif ! selftest "$1" | grep -qx 'result=pass'; then
        flunk "guest ($1): self-test $(selftest "$1" | grep '^result=')"
    fi
}
# wait_selftest NAME SECONDS: until the guest reports its result (and, for
# the first boot, the host sees the agent and its boot run).
wait_selftest() {
    local deadline=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        kill -0 "$qemu_pid" 2>/dev/null || return 1
        if [ "$1" = first ]; then
            if [ -z "$http_s" ] && curl -fsS -m 5 -o "$work/status.json" "$base/api/v1/status" 2>/dev/null; then
                http_s=$(elapsed)
                note "agent answered HTTP ${http_s} s after QEMU started"
            fi
            if [ -n "$http_s" ] && [ -z "$boot_run" ] &&
                curl -fsS -m 5 -o "$work/runs.json" "$base/api/v1/runs" 2>/dev/null; then
                boot_run=$(jq -c '(if type == "array" then . else .runs end)
                    | map(select(.trigger == "boot" and .state != "running")) | first // empty' "$work/runs.json" 2>/dev/null || true)
                [ -n "$boot_run" ] && note "boot suite finished $(elapsed) s after QEMU started"
            fi
        fi
        if selftest "$1" | grep -q '^result='; then
            note "guest self-test ($1) reported $(elapsed) s after QEMU started"
            [ "$1" != first ] || [ -n "$boot_run" ] && return 0
        fi
        sleep 2
    done
    return 1
}
# wait_exit SECONDS: until QEMU ends (the guest rebooted).
wait_exit() {
    local deadline=$(($(date +%s) + $1))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if ! kill -0 "$qemu_pid" 2>/dev/null; then
            wait "$qemu_pid" 2>/dev/null || true
            qemu_pid=""
            return 0
        fi
        sleep 1
    done
    return 1
}

# --- Boot 1: first boot -----------------------------------------------------

set_phase first
http_s="" boot_run=""
note "boot 1 (first boot) of $(basename "$image") under QEMU (TCG, 2 GiB, OVMF); agent on $base"
boot first "$disk"
wait_selftest first "$timeout_s" || note "boot 1: no complete self-test within ${timeout_s} s"
first_total_s=$(elapsed)
curl -sS -m 5 -o "$work/post.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d '{"suite":"inventory"}' "$base/api/v1/runs" >"$work/post.code" 2>/dev/null || echo 000 >"$work/post.code"
curl -fsS -m 5 -o "$work/image.json" "$base/api/v1/image" 2>/dev/null || echo '{}' >"$work/image.json"
stop_qemu

if [ -n "$http_s" ]; then
    pass "GET /api/v1/status answered after ${http_s} s: $(jq -c '{state, version}' "$work/status.json" 2>/dev/null)"
else
    flunk "GET $base/api/v1/status never answered within ${timeout_s} s"
fi
post_code=$(cat "$work/post.code")
case "$post_code" in
401 | 403) pass "POST /api/v1/runs without the box's token refused ($post_code)" ;;
*) flunk "POST /api/v1/runs without a token answered $post_code (want 401 or 403)" ;;
esac
if [ -n "$boot_run" ]; then
    boot_suite=$(jq -r .suite <<<"$boot_run")
    boot_state=$(jq -r .state <<<"$boot_run")
    case "$boot_suite/$boot_state" in
    acceptance/passed | acceptance/failed)
        pass "boot suite run $(jq -r .id <<<"$boot_run") ($boot_suite) listed as finished: $boot_state" ;;
    *) flunk "boot run $(jq -r .id <<<"$boot_run"): suite $boot_suite, state $boot_state (want acceptance, passed or failed)" ;;
    esac
else
    flunk "no finished boot run in GET /api/v1/runs"
fi
if [ "$(jq -r '.version' "$work/image.json")" = "$version" ] && [ "$(jq -r '.verity' "$work/image.json")" = verified ]; then
    pass "GET /api/v1/image: $(jq -c '{version, slot, verity, other_version}' "$work/image.json")"
else
    flunk "GET /api/v1/image: $(cat "$work/image.json")"
fi
verdicts first
hostname=$(info first hostname)
want_hostname="tinybox-$(tr '[:upper:]' '[:lower:]' <<<"$serial_number")"
if [ "$hostname" = "$want_hostname" ]; then
    pass "first boot named the box after its serial: $hostname"
else
    flunk "hostname '$hostname' (want $want_hostname from the SMBIOS serial)"
fi
var_bytes=$(info first var_part_bytes)
if [ -n "$var_bytes" ] && [ "$var_bytes" -gt $(((grow_by_mib - 64) * 1048576)) ]; then
    pass "state partition made at first boot in the added space: $((var_bytes / 1048576)) MiB (disk +$grow_by_mib MiB)"
else
    flunk "state partition ${var_bytes:-missing} bytes, want about the $grow_by_mib MiB added to the disk"
fi
info first partitions | sed 's/^/  note  partitions after first boot: /'
image_version_guest=$(info first image_version)
[ "$image_version_guest" = "$version" ] && pass "os-release IMAGE_VERSION=$version" ||
    flunk "os-release IMAGE_VERSION='$image_version_guest' (want $version)"
marker=$(info first marker) machine_id=$(info first machine_id) token=$(info first token_sha256)

# --- Boot 2: the state is kept; a factory reset is asked for -----------------

set_phase persist
note "boot 2 (the same disk again)"
boot persist "$disk"
wait_selftest persist "$timeout_s" || note "boot 2: no complete self-test within ${timeout_s} s"
verdicts persist
[ "$(info persist marker)" = "$marker" ] && [ "$marker" != none ] &&
    pass "marker $marker on the state partition survived the reboot" ||
    flunk "marker after reboot '$(info persist marker)' (written: '$marker')"
[ "$(info persist machine_id)" = "$machine_id" ] && [ "$(info persist token_sha256)" = "$token" ] &&
    pass "machine-id and token kept across the reboot" ||
    flunk "identity changed across a plain reboot: machine-id $(info persist machine_id) vs $machine_id"
if wait_exit 120; then
    reset_http=$(info persist factory_reset_http)
    case "$reset_http" in
    202*) pass "POST /api/v1/image/factory-reset: $reset_http; the box rebooted" ;;
    *) flunk "factory reset over HTTP: ${reset_http:-no answer}" ;;
    esac
else
    flunk "the box did not reboot within 120 s of asking for a factory reset ($(info persist factory_reset_http))"
    stop_qemu
fi
stop_qemu

# --- Boot 3: the factory-reset boot; boot 4: a box as on its first boot -------

note "boot 3 (the one-shot factory-reset boot)"
boot reset "$disk"
reset_seen=0
deadline=$(($(date +%s) + timeout_s))
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$qemu_pid" 2>/dev/null; do
    if curl -fsS -m 5 -o "$work/image-reset.json" "$base/api/v1/image" 2>/dev/null; then
        reset_seen=1
        break
    fi
    sleep 2
done
reset_http_s=$(elapsed)
if grep -q 'systemd.factory_reset=1' "$work/serial-reset.log" 2>/dev/null ||
    grep -q 'factory reset: the state partition is erased' "$work/serial-reset.log" 2>/dev/null; then
    pass "boot 3 ran the factory-reset profile: $(tr -d '\r' <"$work/serial-reset.log" | grep -m1 -o 'tinybox-state: factory reset.*' || echo 'systemd.factory_reset=1 on the command line')"
else
    flunk "boot 3 was not a factory-reset boot (no systemd.factory_reset=1 on its console)"
fi
[ "$reset_seen" = 1 ] && pass "after the factory reset the agent answered in ${reset_http_s} s" ||
    flunk "after the factory reset the agent did not answer within ${timeout_s} s"
sleep 5
stop_qemu

set_phase after-reset
note "boot 4 (after the factory reset)"
boot after-reset "$disk"
wait_selftest after-reset "$timeout_s" || note "boot 4: no complete self-test within ${timeout_s} s"
stop_qemu
verdicts after-reset
[ "$(info after-reset marker)" = none ] && pass "the marker is gone after the factory reset" ||
    flunk "marker after the factory reset: '$(info after-reset marker)'"
new_id=$(info after-reset machine_id) new_token=$(info after-reset token_sha256)
if [ -n "$new_id" ] && [ "$new_id" != "$machine_id" ] && [ -n "$new_token" ] && [ "$new_token" != "$token" ]; then
    pass "a new identity after the factory reset: machine-id $new_id, a new token"
else
    flunk "identity after the factory reset: machine-id '$new_id' (was $machine_id), token '$new_token' (was $token)"
fi
[ "$(info after-reset image_version)" = "$version" ] && pass "the same OS version $version after the factory reset" ||
    flunk "OS version after the factory reset: '$(info after-reset image_version)'"

# --- A tampered slot: bytes flipped in the root's data ------------------------

note "boot 5 (a copy of the image with bytes flipped in slot A's data)"
tampered="$work/tampered.raw"
cp --sparse=always "$image" "$tampered"
truncate -s "+${grow_by_mib}M" "$tampered"
root_start=$(part "tinybox_${version}_r" start)
# Inside the filesystem's superblock (block 0), which the mount reads first.
printf '\xde\xad\xbe\xef' | dd of="$tampered" bs=1 seek=$((root_start * sector + 1100)) conv=notrunc status=none
cp "$ovmf_vars" "$work/vars.fd"
boot tampered "$tampered"
deadline=$(($(date +%s) + 240))
verity_line=""
agent_up=0
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$qemu_pid" 2>/dev/null; do
    verity_line=$(tr -d '\r' 2>/dev/null <"$work/serial-tampered.log" | grep -m1 -E 'device-mapper: verity.*(corrupted|mismatch)' || true)
    if curl -fsS -m 3 -o /dev/null "$base/api/v1/status" 2>/dev/null; then agent_up=1; fi
    [ -n "$verity_line" ] && sleep 20 && break
    sleep 2
done
if curl -fsS -m 3 -o /dev/null "$base/api/v1/status" 2>/dev/null; then agent_up=1; fi
stop_qemu
if [ -n "$verity_line" ] && [ "$agent_up" = 0 ]; then
    pass "tampered slot not run; console: $(sed 's/^.*\] //' <<<"$verity_line")"
else
    flunk "tampered slot: verity error '${verity_line:-none on the console}', agent answered: $agent_up"
fi

{
    echo "image=$image"
    echo "image_bytes=$image_bytes"
    echo "version=$version"
    echo "qemu_to_http_s=${http_s:-none}"
    echo "first_boot_total_s=$first_total_s"
    echo "factory_reset_boot_to_http_s=$reset_http_s"
    echo "failures=$failures"
    selftest first | sed 's/^info //; t; s/^/check /'
} >"$out/result.txt"
note "QEMU start to HTTP: ${http_s:-never} s; first boot's self-test done ${first_total_s} s; consoles in $out/serial-*.log"
if [ "$failures" -gt 0 ]; then
    die "$failures check(s) failed"
fi
note "pass"
