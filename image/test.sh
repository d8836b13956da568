#!/bin/bash
# Boots the tinybox image under QEMU (TCG, 2 GiB, OVMF, systemd-boot) and
# checks it from the host:
#   - the agent answers GET /api/v1/status on a host port bound to 127.0.0.1;
#   - HTTP writes without the box's token are refused;
#   - the boot suite (acceptance, with a small GEMM in the test copy's
#     configuration: TCG is slow) ran and is listed as finished;
#   - inside the guest (tinybox-selftest.service, switched on for this boot
#     only through a test copy of the boot entry): the agent unit is active, a
#     D-Bus Start runs and finishes, first boot gave the box its identity
#     (hostname from the SMBIOS serial, machine-id, token 0600, SSH host keys)
#     and grew the root filesystem to the larger test disk.
# QEMU is killed by its PID on every path; nothing is left running.
#
#   image/test.sh [--image FILE] [--out DIR] [--timeout SECONDS]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
image="$repo/out/image/tinybox-cpu.raw"
out="$repo/out/image-test"
timeout_s=540
serial_number=TBTEST0001
grow_by_mib=2048
test_gemm_size=256

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
"$repo/image/host-deps.sh" test || die "cannot install the test tools (see above)"
firmware=/usr/share/ovmf/OVMF.fd
[ -f "$firmware" ] || die "no UEFI firmware at $firmware (apt-get install ovmf)"
for tool in qemu-system-x86_64 curl jq sfdisk mtype mcopy ss debugfs; do
    command -v "$tool" >/dev/null || die "missing tool '$tool'"
done

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
    if [ -f "$work/serial.log" ]; then tr -d '\r' <"$work/serial.log" >"$out/serial.log"; fi
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- A test copy of the disk: larger, and booting with the self-test on ------

disk="$work/disk.raw"
cp --sparse=always "$image" "$disk"
image_bytes=$(stat -c %s "$image")
truncate -s "+${grow_by_mib}M" "$disk"

table=$(sfdisk -J "$image") || die "$image has no readable partition table"
sector=$(jq -r '.partitiontable.sectorsize // 512' <<<"$table")
esp_start=$(jq -r '.partitiontable.partitions[] | select(.name == "esp") | .start' <<<"$table")
root_sectors=$(jq -r '.partitiontable.partitions[] | select(.name == "root") | .size' <<<"$table")
if [ -z "$esp_start" ] || [ -z "$root_sectors" ]; then
    die "$image has no partitions named esp and root"
fi
root_part_bytes=$((root_sectors * sector))
esp="$disk@@$((esp_start * sector))"

export MTOOLS_SKIP_CHECK=1
entry=$(mtype -i "$esp" ::/loader/entries/tinybox.conf) || die "the ESP of $image has no loader/entries/tinybox.conf"
sed -e 's/^title .*/& (self-test)/' -e 's/^options .*/& systemd.wants=tinybox-selftest.service/' \
    <<<"$entry" >"$work/tinybox-selftest.conf"
printf 'default tinybox-selftest.conf\ntimeout 0\n' >"$work/loader.conf"
mcopy -o -i "$esp" "$work/tinybox-selftest.conf" ::/loader/entries/tinybox-selftest.conf
mcopy -o -i "$esp" "$work/loader.conf" ::/loader/loader.conf

# The acceptance suite's default CPU GEMM (2048^3) takes many minutes under
# TCG, and so does a ResNet-50 step at 224²; the test copy runs the same boot
# suite with a small GEMM and a tiny training step. The flashable
# image keeps the defaults. debugfs edits the copy's ext4 without mounting it.
root_start=$(jq -r '.partitiontable.partitions[] | select(.name == "root") | .start' <<<"$table")
root_img="$work/root.img"
dd if="$disk" of="$root_img" bs=4M iflag=skip_bytes,count_bytes \
    skip=$((root_start * sector)) count="$root_part_bytes" conv=sparse status=none
config=/etc/tinyperf/tinyperf.toml
debugfs -R "cat $config" "$root_img" 2>/dev/null >"$work/tinyperf.toml"
grep -q '^boot_suite = "acceptance"' "$work/tinyperf.toml" ||
    die "the image's $config does not set boot_suite = \"acceptance\""
echo "boot_options = { gemm_size = $test_gemm_size, gemm_seconds = 1, train_batch = 2, train_image_size = 32, train_steps = 1, train_warmup = 0 }" >>"$work/tinyperf.toml"
debugfs -w -R "rm $config" "$root_img" >/dev/null 2>&1
debugfs -w -R "write $work/tinyperf.toml $config" "$root_img" >/dev/null 2>&1
debugfs -w -R "sif $config mode 0100644" "$root_img" >/dev/null 2>&1
debugfs -R "cat $config" "$root_img" 2>/dev/null | grep -q '^boot_options' ||
    die "cannot write the test configuration into the copy of the root filesystem"
dd if="$root_img" of="$disk" bs=4M oflag=seek_bytes seek=$((root_start * sector)) conv=notrunc,sparse status=none
rm -f "$root_img"

port=""
for p in $(seq 18470 18570); do
    if [ -z "$(ss -Hltn "sport = :$p")" ]; then
        port=$p
        break
    fi
done
[ -n "$port" ] || die "no free TCP port in 18470-18570 on 127.0.0.1"
base="http://127.0.0.1:$port"

# --- Boot ---------------------------------------------------------------------

serial="$work/serial.log"
note "booting $(basename "$image") under QEMU (TCG, 2 GiB, OVMF); agent on $base"
started=$(date +%s.%N)
qemu-system-x86_64 \
    -machine q35 -accel tcg -cpu max -smp 2 -m 2048 \
    -bios "$firmware" \
    -display none -monitor none -serial "file:$serial" -no-reboot \
    -smbios "type=1,serial=$serial_number" \
    -drive "file=$disk,format=raw,if=virtio,cache=unsafe" \
    -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:8470" \
    -device virtio-net-pci,netdev=n0 \
    </dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!

elapsed() { echo "$(date +%s.%N) $started" | awk '{ printf "%.1f", $1 - $2 }'; }

http_s=""
boot_run=""
selftest_done=0
deadline=$(($(date +%s) + timeout_s))
while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$qemu_pid" 2>/dev/null || { cat "$work/qemu.log" >&2; die "QEMU exited early (serial log above: $serial)"; }
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
    if [ "$selftest_done" = 0 ] && grep -q 'TINYBOX-SELFTEST result=' "$serial" 2>/dev/null; then
        selftest_done=1
        note "guest self-test reported $(elapsed) s after QEMU started"
    fi
    if [ -n "$boot_run" ] && [ "$selftest_done" = 1 ]; then break; fi
    sleep 2
done
total_s=$(elapsed)

# Read everything the checks need while the guest still runs, then stop it.
curl -sS -m 5 -o "$work/post.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d '{"suite":"inventory"}' "$base/api/v1/runs" >"$work/post.code" 2>/dev/null || echo 000 >"$work/post.code"
stop_qemu
tr -d '\r' <"$serial" >"$out/serial.log"

# --- Verdicts -----------------------------------------------------------------

failures=0
pass() { echo "  ok    $*"; }
flunk() { echo "  FAIL  $*"; failures=$((failures + 1)); }
# The console is shared with getty, whose login prompt can precede a line unterminated.
selftest() { sed -n "s/^.*TINYBOX-SELFTEST //p" "$out/serial.log"; }
info() { selftest | sed -n "s/^info $1=//p" | head -1; }

echo "image-test results ($(basename "$image")):"
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
while read -r verdict detail; do
    case "$verdict" in
    ok) pass "guest: $detail" ;;
    FAIL) flunk "guest: $detail" ;;
    esac
done < <(selftest)
if [ "$selftest_done" = 0 ]; then
    flunk "the guest self-test did not finish (last: $(selftest | tail -1))"
elif ! selftest | grep -qx 'result=pass'; then
    flunk "guest self-test: $(selftest | grep '^result=')"
fi
hostname=$(info hostname)
want_hostname="tinybox-$(tr '[:upper:]' '[:lower:]' <<<"$serial_number")"
if [ "$hostname" = "$want_hostname" ]; then
    pass "first boot named the box after its serial: $hostname"
else
    flunk "hostname '$hostname' (want $want_hostname from the SMBIOS serial)"
fi
root_fs_bytes=$(info root_fs_bytes)
if [ -n "$root_fs_bytes" ] && [ "$root_fs_bytes" -gt "$root_part_bytes" ]; then
    pass "root filesystem grown to the disk: $((root_fs_bytes / 1048576)) MiB (partition was $((root_part_bytes / 1048576)) MiB, disk +$grow_by_mib MiB)"
else
    flunk "root filesystem ${root_fs_bytes:-unknown} bytes, not grown past the image's ${root_part_bytes}-byte partition"
fi
failed_lines=$(grep -c 'FAILED' "$out/serial.log" || true)
[ "$failed_lines" -eq 0 ] || echo "  note  $failed_lines FAILED line(s) on the console; see $out/serial.log"

{
    echo "image=$image"
    echo "image_bytes=$image_bytes"
    echo "qemu_to_http_s=${http_s:-none}"
    echo "total_s=$total_s"
    echo "boot_run=${boot_run:-none}"
    echo "failures=$failures"
    selftest | sed 's/^info //; t; s/^/check /'
} >"$out/result.txt"
note "QEMU start to HTTP: ${http_s:-never} s; whole test ${total_s} s; serial log $out/serial.log"
if [ "$failures" -gt 0 ]; then
    die "$failures check(s) failed"
fi
note "pass"
