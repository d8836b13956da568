#!/bin/bash
# Checks a red or green image without its GPUs, in a chroot of the image's root
# filesystem: every check runs the image's own binaries (tinyperf, modinfo,
# python3, dbus-daemon, busctl, curl, sha256sum) against the image's own
# libraries, and prints one line, ok or FAIL:
#   - tinyperf gpu compile builds the kernels with the image's compiler for the
#     box's GPU (red: hiprtc, gfx1100 code objects; green: NVRTC, a cubin for
#     sm_89 or PTX no newer than ISA 8.4, what driver 550 loads);
#   - tinyperf detect --json loads every GPU library the box needs, with its
#     version, and says "no device" (not "library not found") for the runtime;
#   - red: rocBLAS loads and has gfx1100 code objects beside TensileLibrary.dat;
#     the amdgpu firmware gfx1100 needs is there; green: the NVIDIA module DKMS
#     built at image build time matches the image's kernel and no compiler,
#     DKMS or kernel headers are left, nvidia-uvm resolves for modules-load.d,
#     the GSP firmware is there, the cuDNN libraries are the wheel's bytes;
#   - the shell completions (bash, zsh, fish) and man pages make install
#     generated are in the image, as the image's tinyperf generates them;
#   - the agent starts, answers HTTP and, on a dbus-daemon of the image's own
#     (this script's configuration, the image's policy files), D-Bus.
# The unit's Environment= lines (tinyperf.service and its drop-ins in the
# image, green: cuDNN's library path) apply to every tinyperf command, as
# systemd would apply them. The chroot lives in private mount, network and PID
# namespaces: nothing is mounted on the host, the agent's port is the
# namespace's own, and every process ends with the namespace.
#
#   image/test-rootfs.sh --variant red|green [--in DIR] [--root DIR] [--out DIR]
#
# The root filesystem is --root, else DIR/tinybox-VARIANT.rootfs (make
# image-rootfs), else slot A's root filesystem (erofs) of DIR/tinybox-VARIANT.raw
# (make image), copied out with the build's trixie fsck.erofs; the newer of the
# two when both exist.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
variant=""
in="$repo/out/image"
root=""
out=""

die() {
    echo "make image-test: $*" >&2
    exit 1
}
note() { echo "image-test: $*"; }

if [ "${1:-}" = --inside ]; then
    inside=1
    shift
else
    inside=0
fi

while [ $# -gt 0 ]; do
    case "$1" in
    --variant) variant=${2:?--variant needs a value}; shift 2 ;;
    --in) in=${2:?--in needs a folder}; shift 2 ;;
    --root) root=${2:?--root needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    -h | --help) sed -n "2,/^set -euo/{/^#/p}" "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# --- Inside the namespaces: mounts, then the checks -------------------------

if [ "$inside" = 1 ]; then
    # Each check reports its own failure; one failing does not stop the rest.
    set +e +o pipefail
    R=$root
    # What the variant file asks of the image: CHECK_MODULES, MODULES_LOAD.
    CHECK_MODULES="" MODULES_LOAD=""
    # shellcheck source=/dev/null
    . "$repo/image/variants/$variant.conf"
    pass() { echo "  ok    $*"; }
    flunk() { echo "  FAIL  $*"; }
    in_image() { chroot "$R" "$@"; }
    # A file in the image, uncompressed or as the kernel's firmware loader
    # also takes it (.zst, .xz).
    have_file() { [ -f "$R$1" ] || [ -f "$R$1.zst" ] || [ -f "$R$1.xz" ]; }

    # /proc of this PID namespace, a read-only sysfs (the host's devices, this
    # network namespace's interfaces), a /dev with only the pseudo devices,
    # fresh /run and /tmp.
    # Nothing is written into the root filesystem if these fail.
    if ! { mount -t proc proc "$R/proc" && mount -t sysfs -o ro sysfs "$R/sys" &&
        mount -t tmpfs -o mode=0755 dev "$R/dev" && mount -t tmpfs -o mode=0755 run "$R/run" &&
        mount -t tmpfs -o mode=1777 tmp "$R/tmp"; }; then
        flunk "cannot mount /proc, /sys, /dev, /run and /tmp in $R"
        exit 1
    fi
    for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
        IFS=: read -r n major minor <<<"$d"
        mknod -m 0666 "$R/dev/$n" c "$major" "$minor"
    done
    mkdir -p "$R/dev/shm" "$R/dev/pts"
    mount -t tmpfs -o mode=1777 shm "$R/dev/shm"
    ip link set lo up 2>/dev/null || in_image ip link set lo up

    # The unit's environment: Environment= of tinyperf.service, then of its
    # drop-ins in name order, as systemd reads them (KEY=VALUE words; quoted
    # values are not used by these units).
    unit_env=()
    unit_files=()
    for d in /usr/lib/systemd/system /etc/systemd/system; do
        [ -f "$R$d/tinyperf.service" ] && unit_files+=("$R$d/tinyperf.service")
    done
    while IFS= read -r f; do unit_files+=("$f"); done < <(
        for d in /usr/lib/systemd/system /etc/systemd/system; do
            [ -d "$R$d/tinyperf.service.d" ] && find "$R$d/tinyperf.service.d" -maxdepth 1 -name '*.conf' -printf '%f %p\n'
        done | sort | cut -d' ' -f2-)
    for f in "${unit_files[@]}"; do
        while IFS= read -r line; do
            for word in ${line#Environment=}; do unit_env+=("$word"); done
        done < <(grep -E '^Environment=' "$f" || true)
    done
    tp() { chroot "$R" env "${unit_env[@]}" /usr/bin/tinyperf "$@"; }
    echo "  info  unit environment: ${unit_env[*]:-none} (from ${unit_files[*]#"$R"})"

    version=$(tp --version 2>&1) && pass "tinyperf runs in the image: $version" ||
        flunk "tinyperf --version in the image: $version"

    # -- completions and man pages: make install put them in, the dpkg
    # path-excludes (/usr/share/man/*, for the packages) left them, and they are
    # what the image's own tinyperf generates.
    generated=""
    for f in share/bash-completion/completions/tinyperf:bash \
        share/zsh/vendor-completions/_tinyperf:zsh \
        share/fish/vendor_completions.d/tinyperf.fish:fish; do
        file=/usr/${f%:*} shell=${f##*:}
        if ! [ -s "$R$file" ]; then
            flunk "$shell completion: no $file in the image"
        elif ! tp completions "$shell" 2>&1 | cmp -s - "$R$file"; then
            flunk "$shell completion: $file is not what the image's tinyperf generates"
        elif [ "$shell" = bash ] && ! in_image bash -n "$file" 2>"$results/bash-completion.err"; then
            flunk "bash completion: bash -n $file says $(head -c 300 "$results/bash-completion.err")"
        else
            generated="$generated $shell"
        fi
    done
    [ -z "$generated" ] || pass "completions for$generated in the image, as its tinyperf generates them (bash: bash -n clean)"
    # The pages the image's tinyperf writes (their dates are today's), each
    # installed under the same name.
    missing="" count=0
    for page in $(tp man --dir /tmp/man-pages 2>&1); do
        count=$((count + 1))
        [ -s "$R/usr/share/man/man1/${page##*/}" ] || missing="$missing ${page##*/}"
    done
    if [ "$count" -gt 1 ] && [ -z "$missing" ] &&
        grep -q '^\.TH TINYPERF 1 ' "$R/usr/share/man/man1/tinyperf.1"; then
        pass "man pages in the image: tinyperf.1 and $((count - 1)) subcommand pages in /usr/share/man/man1"
    else
        flunk "man pages: of the $count tinyperf man --dir writes, missing from /usr/share/man/man1:${missing:- none (or tinyperf.1 has no .TH TINYPERF 1 line)}"
    fi

    # An operator at the box's shell gets them: man finds the page, and
    # bash-completion loads the completion on demand.
    if where=$(in_image man -w tinyperf 2>&1); then
        pass "man -w tinyperf in the image: $where"
    else
        flunk "man -w tinyperf in the image: $where (is man-db installed?)"
    fi
    [ -f "$R/usr/share/bash-completion/bash_completion" ] &&
        pass "bash-completion is installed, so the tinyperf completion loads in a login shell" ||
        flunk "no /usr/share/bash-completion/bash_completion in the image: the completion never loads"

    # -- gpu compile with the image's compiler ---------------------------------
    case "$variant" in
    red) compile_args=(--runtime hip --arch gfx1100) ;;
    green) compile_args=(--runtime cuda --arch sm_89) ;;
    esac
    rc=0
    tp gpu compile "${compile_args[@]}" --json >"$R/tmp/compile.json" 2>"$R/tmp/compile.err" || rc=$?
    cp "$R/tmp/compile.json" "$R/tmp/compile.err" "$results/" 2>/dev/null || true
    compiler=$(in_image jq -r '"\(.compiler.name) \(.compiler.version) (\(.compiler.path))"' /tmp/compile.json 2>/dev/null || echo "?")
    target=$(in_image jq -c '.targets[0] | {arch, ok, format, ptx_isa, elf_arch, bytes, error}' /tmp/compile.json 2>/dev/null || echo "")
    verdict=$(in_image jq -r --arg v "$variant" '.targets[0] as $t
        | if ($t.ok != true) then "not ok"
          elif $v == "red" then (if $t.elf_arch == "gfx1100" then "yes" else "elf_arch is not gfx1100" end)
          elif $t.format == "cubin" then (if $t.elf_arch == "sm_89" then "yes" else "cubin not for sm_89" end)
          elif $t.format == "ptx" then
            ($t.ptx_isa | tostring | split(".") | map(tonumber)) as $i
            | (if ($i[0] < 8 or ($i[0] == 8 and $i[1] <= 4)) then "yes" else "PTX ISA newer than 8.4 (driver 550)" end)
          else "unknown format" end' /tmp/compile.json 2>/dev/null || echo "no JSON")
    if [ "$rc" = 0 ] && [ "$verdict" = yes ]; then
        pass "gpu compile ${compile_args[*]}: $compiler -> $target"
    else
        flunk "gpu compile ${compile_args[*]} (exit $rc): ${verdict}; $compiler -> ${target:-$(head -c 300 "$R/tmp/compile.err")}"
    fi

    # -- detect: every library loaded with a version, "no device" ---------------
    rc=0
    tp detect --json >"$R/tmp/detect.json" 2>"$R/tmp/detect.err" || rc=$?
    cp "$R/tmp/detect.json" "$R/tmp/detect.err" "$results/" 2>/dev/null || true
    case "$variant" in
    red) libs="hip hiprtc rocblas rccl rocm-smi" runtime=hip ;;
    green) libs="driver nvrtc cublas cublaslt cudnn nccl nvml" runtime=cuda ;;
    esac
    for lib in $libs; do
        entry=$(in_image jq -c --arg n "$lib" '[.runtime.libraries[]? | select(.name == $n)] | first // empty' /tmp/detect.json 2>/dev/null || true)
        status=$(in_image jq -rn --argjson e "${entry:-null}" '$e.status // "absent from .runtime.libraries"' 2>/dev/null)
        lib_version=$(in_image jq -rn --argjson e "${entry:-null}" '$e.version // empty' 2>/dev/null)
        if [ "$status" = loaded ] && [ -n "$lib_version" ]; then
            pass "detect: $lib loaded, version $lib_version ($(in_image jq -rn --argjson e "$entry" '$e.path'))"
        else
            flunk "detect: $lib $status${lib_version:+ version $lib_version} ${entry:+$entry}"
        fi
    done
    finding=$(in_image jq -r --arg r "$runtime" '.runtime[$r].finding // "none"' /tmp/detect.json 2>/dev/null || echo "no JSON (exit $rc)")
    if [[ "$finding" == *"no device"* ]] && [[ "$finding" != *"not found"* ]]; then
        pass "detect: runtime $runtime loaded, finding \"$finding\""
    else
        flunk "detect: runtime $runtime finding \"$finding\" (want \"no device\")"
    fi

    kver=$(find "$R/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -1)

    # -- red: rocBLAS, firmware, rocminfo ---------------------------------------
    if [ "$variant" = red ]; then
        # rocBLAS from the image's Python: the library loads and tells its
        # version; its Tensile folder has TensileLibrary.dat and, for gfx1100,
        # AMDGPU ELF code objects whose e_flags name gfx1100 (0x41), and no
        # other architecture's.
        rocblas=$(in_image python3 - <<'PY' 2>&1
import ctypes, glob, os, struct, sys
lib = ctypes.CDLL("librocblas.so.0")
buf = ctypes.create_string_buffer(256)
lib.rocblas_get_version_string.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
if lib.rocblas_get_version_string(buf, 256) != 0:
    sys.exit("rocblas_get_version_string failed")
dirs = glob.glob("/usr/lib/x86_64-linux-gnu/rocblas/*/library")
if len(dirs) != 1:
    sys.exit(f"want one rocBLAS library folder, found {dirs}")
d = dirs[0]
if not os.path.isfile(os.path.join(d, "TensileLibrary.dat")):
    sys.exit(f"no TensileLibrary.dat in {d}")
problems, found = [], []
for pattern in ("TensileLibrary_gfx1100.co", "Kernels.so-*-gfx1100.hsaco"):
    files = glob.glob(os.path.join(d, pattern))
    if not files:
        problems.append(f"no {pattern}")
    for f in files:
        head = open(f, "rb").read(64)
        machine = struct.unpack_from("<H", head, 18)[0]
        flags = struct.unpack_from("<I", head, 48)[0]
        if head[:4] != b"\x7fELF" or machine != 224 or flags & 0xFF != 0x41:
            problems.append(f"{os.path.basename(f)}: machine {machine} e_flags {flags:#x}, not an AMDGPU gfx1100 code object")
        else:
            found.append(f"{os.path.basename(f)} ({os.path.getsize(f) >> 20} MiB, e_flags {flags:#x})")
others = sorted({os.path.basename(f) for f in os.listdir(d) if "gfx" in f and "gfx1100" not in f})
if others:
    problems.append(f"other architectures left: {' '.join(others[:4])}")
print(f"rocBLAS {buf.value.decode()} in {d}: TensileLibrary.dat, " + ", ".join(found))
if problems:
    sys.exit("; ".join(problems))
PY
        ) && pass "rocblas: $rocblas" || flunk "rocblas: $rocblas"

        # The firmware the image's amdgpu module asks for, for the RX 7900 XTX's
        # blocks, present in the image (as .bin or compressed). Two kinds it
        # lists are not loaded on this card: *_kicker.bin (the kernel takes them
        # only for the boards in its kicker list, 1002:744B revision 00; the
        # 7900 XTX is 1002:744C) and gc_11_0_0_toc.bin (RLC backdoor loading
        # only; the default is loading through the PSP).
        fw=$(in_image modinfo -k "$kver" -F firmware amdgpu 2>&1 | grep -E '^amdgpu/(gc_11_0_0|psp_13_0_0|smu_13_0_0|sdma_6_0_0)' || true)
        missing="" count=0 unused=""
        for f in $fw; do
            case "$f" in
            *_kicker.bin | */gc_11_0_0_toc.bin)
                have_file "/usr/lib/firmware/$f" || unused="$unused ${f#amdgpu/}"
                continue ;;
            esac
            count=$((count + 1))
            have_file "/usr/lib/firmware/$f" || missing="$missing $f"
        done
        blocks=$(for b in gc_11_0_0 psp_13_0_0 smu_13_0_0 sdma_6_0_0; do grep -q "/$b" <<<"$fw" && echo "$b"; done | wc -l)
        if [ "$count" -gt 0 ] && [ "$blocks" = 4 ] && [ -z "$missing" ]; then
            pass "amdgpu firmware for gfx1100: all $count files amdgpu ($kver) loads for gc_11_0_0, psp_13_0_0, smu_13_0_0, sdma_6_0_0 are there"
        else
            flunk "amdgpu firmware for gfx1100: $count files wanted, $blocks of 4 blocks named, missing:${missing:- none}"
        fi
        [ -z "$unused" ] || echo "  info  listed by amdgpu but not loaded on a 7900 XTX, and not in the image:$unused"

        info=$(in_image rocminfo 2>&1 | head -3 | sed "s/\x1b\[[0-9;]*m//g" | tr "\n" " ")
        if [[ "${info,,}" == *"rock module is not loaded"* ]] || [[ "$info" == *"HSA System Attributes"* ]]; then
            pass "rocminfo runs: ${info:0:120}"
        else
            flunk "rocminfo: ${info:0:200}"
        fi
    fi

    # -- green: kernel module, firmware, cuDNN files -------------------------
    if [ "$variant" = green ]; then
        in_tree=$(find "$R/lib/modules/$kver/kernel" -name '*.ko*' -print -quit)
        want=$(in_image modinfo -F vermagic "${in_tree#"$R"}" 2>&1)
        for mod in $CHECK_MODULES; do
            got=$(in_image modinfo -k "$kver" -F vermagic "$mod" 2>&1) || got="none: $got"
            file=$(in_image modinfo -k "$kver" -F filename "$mod" 2>/dev/null || true)
            if [ "$got" = "$want" ]; then
                pass "module $mod for $kver: $file, vermagic '$got' as the kernel's"
            else
                flunk "module $mod for $kver: vermagic '$got', the kernel's is '$want'"
            fi
        done
        # Built at image build time: no compiler, DKMS or kernel headers on the box.
        leftovers=""
        for f in /usr/bin/gcc /usr/bin/cc /usr/bin/make /usr/sbin/dkms "/lib/modules/$kver/build"; do
            [ ! -e "$R$f" ] || leftovers="$leftovers $f"
        done
        headers=$(find "$R/usr/src" -maxdepth 1 -name 'linux-headers-*' -printf ' %f' 2>/dev/null || true)
        if [ -z "$leftovers$headers" ]; then
            pass "no compiler, DKMS or kernel headers in the image; the module is a plain file of the slot"
        else
            flunk "build tools left in the image:$leftovers$headers"
        fi
        # Each module modules-load.d names resolves, through modprobe.d, to
        # module files for the image's kernel.
        for mod in $MODULES_LOAD; do
            deps=""
            if grep -qsx "$mod" "$R/usr/lib/modules-load.d/tinybox-gpu.conf" &&
                deps=$(in_image modprobe -S "$kver" --show-depends "$mod" 2>&1) && [ -n "$deps" ]; then
                pass "modules-load.d loads $mod: $(echo "$deps" | tr '\n' ';' | tr -s ' ')"
            else
                flunk "modules-load.d / $mod: ${deps:-not listed in /usr/lib/modules-load.d/tinybox-gpu.conf}"
            fi
        done
        gsp=$(in_image modinfo -k "$kver" -F firmware "${CHECK_MODULES%% *}" 2>&1 | grep gsp || true)
        missing=""
        for f in $gsp; do have_file "/usr/lib/firmware/$f" || missing="$missing $f"; done
        if [ -n "$gsp" ] && [ -z "$missing" ]; then
            pass "GSP firmware the nvidia module asks for: $(echo $gsp)"
        else
            flunk "GSP firmware: asked for '$(echo $gsp)', missing:${missing:- none}"
        fi
        sums=$(find "$R/usr/lib/tinyperf/nvidia" -maxdepth 1 -name '*.SHA256SUMS' -printf '%f\n' 2>/dev/null)
        if [ -n "$sums" ] && checked=$(cd "$R/usr/lib/tinyperf/nvidia" && in_image sh -c "cd /usr/lib/tinyperf/nvidia && sha256sum -c --quiet $sums" 2>&1) &&
            ls "$R"/usr/lib/tinyperf/nvidia/*icen* >/dev/null 2>&1; then
            pass "cuDNN in /usr/lib/tinyperf/nvidia: $(grep -c . "$R/usr/lib/tinyperf/nvidia/$sums") libraries match the wheel's RECORD, licence $(cd "$R/usr/lib/tinyperf/nvidia" && ls ./*icen* | xargs -n1 basename)"
        else
            flunk "cuDNN in /usr/lib/tinyperf/nvidia: ${sums:-no SHA256SUMS} ${checked:-}"
        fi
    fi

    # -- the agent over HTTP and D-Bus ------------------------------------------
    # The image's dbus-daemon on the system bus socket, with this script's
    # configuration and the image's policy files (org.tinyperf.Agent1.conf).
    mkdir -p "$R/run/dbus" "$R/run/tinybox-test/state"
    cat >"$R/run/tinybox-test/bus.conf" <<'EOF'
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <includedir>/usr/share/dbus-1/system.d</includedir>
</busconfig>
EOF
    sed -e 's/^boot_suite = .*/boot_suite = "inventory"/' "$R/etc/tinyperf/tinyperf.toml" >"$R/run/tinybox-test/tinyperf.toml"
    in_image dbus-daemon --config-file=/run/tinybox-test/bus.conf --nofork --nopidfile >"$results/dbus.log" 2>&1 &
    for _ in $(seq 1 50); do [ -S "$R/run/dbus/system_bus_socket" ] && break; sleep 0.1; done
    tp agent --config /run/tinybox-test/tinyperf.toml --listen 127.0.0.1:8470 \
        --state-dir /run/tinybox-test/state >"$results/agent.log" 2>&1 &
    agent_pid=$!
    http=""
    for _ in $(seq 1 60); do
        kill -0 "$agent_pid" 2>/dev/null || break
        if http=$(in_image curl -fsS -m 5 http://127.0.0.1:8470/api/v1/status 2>/dev/null); then break; fi
        http=""
        sleep 1
    done
    if [ -n "$http" ]; then
        pass "agent answers HTTP GET /api/v1/status: $(in_image jq -nc --argjson s "$http" '$s | {state, version}' 2>/dev/null)"
    else
        flunk "agent: no HTTP answer within 60 s ($(tail -3 "$results/agent.log" | tr '\n' ' '))"
    fi
    state=""
    for _ in $(seq 1 60); do
        state=$(in_image busctl --system get-property org.tinyperf.Agent1 /org/tinyperf/Agent1 org.tinyperf.Agent1 State 2>&1) && break
        sleep 1
    done
    if [[ "$state" == s\ * ]]; then
        pass "agent owns org.tinyperf.Agent1 on the image's dbus-daemon: State $state"
    else
        flunk "D-Bus State: $state"
    fi
    runs=""
    for _ in $(seq 1 60); do
        runs=$(in_image busctl --system --json=short call org.tinyperf.Agent1 /org/tinyperf/Agent1 org.tinyperf.Agent1 ListRuns u 10 2>&1 |
            in_image jq -r '.data[0] | fromjson | (if type == "array" then . else .runs end) | map("\(.id) \(.suite) \(.state)") | join(", ")' 2>/dev/null || true)
        [[ "$runs" == *inventory* ]] && [[ "$runs" != *running* ]] && break
        sleep 2
    done
    if [[ "$runs" == *inventory* ]]; then
        pass "D-Bus ListRuns: the boot run $runs"
    else
        flunk "D-Bus ListRuns: '${runs}'"
    fi
    kill "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
    exit 0
fi

# --- Outside: find the root filesystem, then enter the namespaces ------------

case "$variant" in
red | green) ;;
"") die "--variant red|green is required (the cpu image is checked by booting it: make image-test)" ;;
*) die "no root-filesystem checks for variant '$variant' (red or green)" ;;
esac
[ "$(id -u)" -eq 0 ] || die "must run as root (chroot and namespaces); try: sudo make image-test VARIANT=$variant"
"$repo/image/host-deps.sh" rootfs-test || die "cannot install the test tools (see above)"
for tool in unshare chroot mount sfdisk jq; do
    command -v "$tool" >/dev/null || die "missing tool '$tool' on the host"
done
out=${out:-$repo/out/image-test-$variant}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.run.XXXXXX")
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ -z "$root" ]; then
    folder="$in/tinybox-$variant.rootfs" raw="$in/tinybox-$variant.raw"
    if [ -d "$folder" ] && { [ ! -f "$raw" ] || [ "$folder" -nt "$raw" ]; }; then
        root=$folder
    elif [ -f "$raw" ]; then
        note "copying slot A's root filesystem out of $raw (erofs, fsck.erofs --extract, no mount)"
        table=$(sfdisk -J "$raw") || die "$raw has no readable partition table"
        sector=$(jq -r '.partitiontable.sectorsize // 512' <<<"$table")
        slot=$(jq -r '[.partitiontable.partitions[] | select(.name | test("^tinybox_.*_r$"))][0] // empty' <<<"$table")
        [ -n "$slot" ] || die "$raw has no root slot (a partition named tinybox_VERSION_r)"
        note "slot A is $(jq -r .name <<<"$slot")"
        dd if="$raw" of="$work/root.img" bs=4M iflag=skip_bytes,count_bytes \
            skip=$(($(jq -r .start <<<"$slot") * sector)) count=$(($(jq -r .size <<<"$slot") * sector)) conv=sparse status=none
        # bookworm's erofs-utils cannot extract; the build's trixie tools tree can.
        tools=$("$repo/image/tools.sh" --out "$in") || die "cannot prepare the trixie tools tree (see above)"
        mkdir "$work/root"
        unshare --mount --propagation private -- /bin/bash -c '
            set -e
            mount --bind "$2" "$1/work"
            exec chroot "$1" fsck.erofs --extract=/work/root --preserve /work/root.img' extract "$tools" "$work" \
            >"$work/extract.log" 2>&1 ||
            { tail -5 "$work/extract.log" >&2; die "fsck.erofs could not copy the root filesystem out of $raw"; }
        rm -f "$work/root.img"
        # /var is the box's state partition, empty at first boot: what the image's
        # tmpfiles.d makes there at boot (/var/run, dpkg's database link, ...).
        systemd-tmpfiles --root="$work/root" --create --prefix=/var >"$work/tmpfiles.log" 2>&1 || true
        for link in var/run var/lib/dpkg; do
            [ -L "$work/root/$link" ] || die "the image's tmpfiles.d made no /$link (see $work/tmpfiles.log)"
        done
        root="$work/root"
    else
        die "no $folder or $raw (run: make image-rootfs VARIANT=$variant, or make image VARIANT=$variant)"
    fi
fi
root=$(cd "$root" && pwd)
[ -x "$root/usr/bin/tinyperf" ] || die "$root has no /usr/bin/tinyperf: not a tinybox root filesystem"

note "checking variant $variant in a chroot of $root"
results="$work/results"
mkdir -p "$results"
export results
started=$(date +%s)
unshare --mount --propagation private --net --pid --fork --kill-child \
    "$0" --inside --variant "$variant" --root "$root" | tee "$work/verdicts.txt"
cp "$results"/* "$out/" 2>/dev/null || true
cp "$work/verdicts.txt" "$out/result.txt"
failures=$(grep -c '^  FAIL' "$work/verdicts.txt" || true)
passes=$(grep -c '^  ok' "$work/verdicts.txt" || true)
note "variant $variant: $passes passed, $failures failed in $(($(date +%s) - started)) s; details in $out"
[ "$passes" -gt 0 ] || die "no check ran"
[ "$failures" -eq 0 ] || die "$failures check(s) failed"
note "pass"
