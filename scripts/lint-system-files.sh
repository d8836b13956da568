#!/usr/bin/env bash
# Checks the files tinyperf installs into the OS image with the tools that read them on
# the box: the systemd unit (systemd-analyze verify and security), the factory-reset path
# unit and service (systemd-analyze verify), the sysusers entry
# (systemd-sysusers), the tmpfiles entry (systemd-tmpfiles, in a scratch root), the D-Bus
# policy and activation file (a real dbus-daemon), and the udev rules (udevadm test, plus a
# syntax check of our own, see lint_udev_rules).
#
# Usage: scripts/lint-system-files.sh [--source DIR] [BINARY]
#   BINARY        the built tinyperf, placed at /usr/bin/tinyperf in the unit's test root
#                 (default: DIR/target/debug/tinyperf)
#   --source DIR  the tree whose systemd/ and udev/ are checked (default: this repository)
#
# Exit status: 0 all files pass, 1 some file fails, 2 the lint itself cannot run.
# Needs (Debian): systemd, dbus-daemon, dbus-bin, udev, util-linux.
set -euo pipefail

source_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case $1 in
        --source)
            [ $# -ge 2 ] || { echo "lint-system-files: --source needs a directory" >&2; exit 2; }
            source_root=$(cd "$2" && pwd)
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        -*)
            echo "lint-system-files: unknown option $1" >&2
            exit 2
            ;;
        *)
            binary=$1
            shift
            ;;
    esac
done
binary=${binary:-$source_root/target/debug/tinyperf}

require_tool() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "lint-system-files: $1 not found (apt-get install $2)" >&2
        exit 2
    fi
}
require_tool systemd-analyze systemd
require_tool systemd-sysusers systemd
require_tool dbus-daemon dbus-daemon
require_tool dbus-send dbus-bin
require_tool udevadm udev
require_tool unshare util-linux

if [ ! -x "$binary" ]; then
    echo "lint-system-files: $binary is not an executable; build tinyperf first or pass its path" >&2
    exit 2
fi
stock_units=/usr/lib/systemd/system
if [ ! -f "$stock_units/sysinit.target" ]; then
    echo "lint-system-files: $stock_units has no stock units (apt-get install systemd)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/lint-system-files.XXXXXX")
bus_pid=
cleanup() {
    if [ -n "$bus_pid" ]; then
        kill "$bus_pid" 2>/dev/null || true
        wait "$bus_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

failures=0
pass() { echo "ok    $*"; }
skip() { echo "skip  $*"; }
fail() {
    echo "FAIL  $1" >&2
    if [ $# -gt 1 ] && [ -n "$2" ]; then
        printf '%s\n' "$2" | sed 's/^/      /' >&2
    fi
    failures=$((failures + 1))
}

# The box's user and group tinyperf (systemd/tinyperf.sysusers.conf) for the tools that
# look names up on this host (udevadm, systemd-tmpfiles): copies of /etc/passwd and
# /etc/group with them added, bound over the originals inside a private mount namespace
# only. Prints the shell lines that do the binding.
namespace=(unshare --mount)
if [ "$(id -u)" -ne 0 ]; then
    namespace=(unshare --user --map-root-user --mount)
fi
box_accounts() {
    local dir=$work/accounts
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir"
        cp /etc/passwd "$dir/passwd"
        cp /etc/group "$dir/group"
        # An id no account of this host has, so that it reads back as tinyperf.
        local id=60100
        while cut -d: -f3 /etc/passwd /etc/group | grep -qx "$id"; do id=$((id + 1)); done
        grep -q '^tinyperf:' "$dir/group" || echo "tinyperf:x:$id:" >>"$dir/group"
        grep -q '^tinyperf:' "$dir/passwd" ||
            echo "tinyperf:x:$id:$id:tinyperf:/var/lib/tinyperf:/usr/sbin/nologin" >>"$dir/passwd"
    fi
    printf 'mount --bind %s /etc/passwd\nmount --bind %s /etc/group\n' "$dir/passwd" "$dir/group"
}

# --- systemd unit -----------------------------------------------------------------------
# `verify` needs the stock units the unit refers to (sysinit.target, dbus.socket, ...)
# and its ExecStart binary, both under --root; it returns 0 on warnings such as an
# unknown key, so any output at all is a failure.
lint_unit() {
    local unit=$source_root/systemd/tinyperf.service
    if [ ! -f "$unit" ]; then
        fail "systemd/tinyperf.service is missing"
        return
    fi
    local root=$work/unit-root
    mkdir -p "$root/usr/bin" "$root/usr/lib/systemd"
    cp -r "$stock_units" "$root/usr/lib/systemd/system"
    ln "$binary" "$root/usr/bin/tinyperf" 2>/dev/null || cp "$binary" "$root/usr/bin/tinyperf"
    cp "$unit" "$root/usr/lib/systemd/system/tinyperf.service"

    local out rc=0
    out=$(systemd-analyze verify --root="$root" tinyperf.service 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        fail "systemd/tinyperf.service: systemd-analyze verify (rc=$rc)" "$out"
        return
    fi
    # The sandbox is part of the unit's contract: losing a hardening line raises the
    # exposure score above the threshold (30 on systemd's 0-100 scale, i.e. 3.0).
    rc=0
    out=$(systemd-analyze security --offline=yes --threshold=30 --root="$root" \
        tinyperf.service 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "systemd/tinyperf.service: exposure above 3.0 (systemd-analyze security)" \
            "$(printf '%s\n' "$out" | tail -n 1)"
        return
    fi
    # Root with a small bounding set still rates low; the agent is user tinyperf's.
    if ! grep -qx 'User=tinyperf' "$unit" || ! grep -qx 'Group=tinyperf' "$unit"; then
        fail "systemd/tinyperf.service does not run the agent as user and group tinyperf"
        return
    fi
    pass "systemd/tinyperf.service ($(printf '%s\n' "$out" | tail -n 1 | sed 's/^→ //'))"
}

# --- factory-reset units ----------------------------------------------------------------
# The path unit that watches for the agent's factory-reset request and the root service
# it starts (tinyperf image factory-reset --requested): systemd-analyze verify, with
# nothing to say; the path must start that service.
lint_factory_reset_units() {
    local path_unit=$source_root/systemd/tinyperf-factory-reset.path
    local service=$source_root/systemd/tinyperf-factory-reset.service
    if [ ! -f "$path_unit" ] && [ ! -f "$service" ]; then
        skip "systemd/tinyperf-factory-reset.{path,service} are not in this tree"
        return
    fi
    if [ ! -f "$path_unit" ] || [ ! -f "$service" ]; then
        fail "systemd/tinyperf-factory-reset.path and .service come together; one is missing"
        return
    fi
    local root=$work/reset-root
    mkdir -p "$root/usr/bin" "$root/usr/lib/systemd"
    cp -r "$stock_units" "$root/usr/lib/systemd/system"
    ln "$binary" "$root/usr/bin/tinyperf" 2>/dev/null || cp "$binary" "$root/usr/bin/tinyperf"
    cp "$path_unit" "$service" "$root/usr/lib/systemd/system/"
    local out rc=0
    out=$(systemd-analyze verify --root="$root" tinyperf-factory-reset.path \
        tinyperf-factory-reset.service 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        fail "systemd/tinyperf-factory-reset.{path,service}: systemd-analyze verify (rc=$rc)" "$out"
    elif ! grep -qx 'Unit=tinyperf-factory-reset.service' "$path_unit" ||
        ! grep -qx 'ExecStart=/usr/bin/tinyperf image factory-reset --requested' "$service"; then
        fail "systemd/tinyperf-factory-reset.path does not start the service that applies the request"
    else
        pass "systemd/tinyperf-factory-reset.path and .service"
    fi
}

# --- update and boot-check units ---------------------------------------------------------
# The path unit that watches for the agent's update request and the root service it
# starts, and the boot check with its failure handler: systemd-analyze verify, with
# nothing to say; the check must be required by boot-complete.target and ordered before
# it, and hand a failure to the handler.
lint_update_units() {
    local units="tinyperf-update.path tinyperf-update.service tinyperf-boot-check.service tinyperf-boot-rejected.service"
    local root=$work/update-root unit missing="" present=0
    for unit in $units; do
        if [ -f "$source_root/systemd/$unit" ]; then present=$((present + 1)); else missing+=" $unit"; fi
    done
    if [ "$present" = 0 ]; then
        skip "systemd/tinyperf-update.{path,service} and tinyperf-boot-*.service are not in this tree"
        return
    fi
    if [ -n "$missing" ]; then
        fail "systemd/: the update and boot-check units come together; missing$missing"
        return
    fi
    mkdir -p "$root/usr/bin" "$root/usr/lib/systemd"
    cp -r "$stock_units" "$root/usr/lib/systemd/system"
    ln "$binary" "$root/usr/bin/tinyperf" 2>/dev/null || cp "$binary" "$root/usr/bin/tinyperf"
    for unit in $units; do cp "$source_root/systemd/$unit" "$root/usr/lib/systemd/system/"; done
    local out rc=0
    # shellcheck disable=SC2086
    out=$(systemd-analyze verify --root="$root" $units 2>&1) || rc=$?
    local check=$source_root/systemd/tinyperf-boot-check.service
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        fail "systemd/tinyperf-update.* and tinyperf-boot-*.service: systemd-analyze verify (rc=$rc)" "$out"
    elif ! grep -qx 'Unit=tinyperf-update.service' "$source_root/systemd/tinyperf-update.path" ||
        ! grep -qx 'ExecStart=/usr/bin/tinyperf image update --requested' "$source_root/systemd/tinyperf-update.service"; then
        fail "systemd/tinyperf-update.path does not start the service that applies the request"
    elif ! grep -qx 'RequiredBy=boot-complete.target' "$check" || ! grep -qx 'Before=boot-complete.target' "$check" ||
        ! grep -qx 'OnFailure=tinyperf-boot-rejected.service' "$check"; then
        fail "systemd/tinyperf-boot-check.service must be RequiredBy= and Before=boot-complete.target, OnFailure=tinyperf-boot-rejected.service"
    else
        pass "systemd/tinyperf-update.{path,service}, tinyperf-boot-check.service, tinyperf-boot-rejected.service"
    fi
}

# --- sysusers ---------------------------------------------------------------------------
# Installed as /usr/lib/sysusers.d/tinyperf.conf; applied to an empty root, it must
# create user and group tinyperf (the agent's) and say nothing about its own lines.
lint_sysusers() {
    local conf=$source_root/systemd/tinyperf.sysusers.conf
    if [ ! -f "$conf" ]; then
        fail "systemd/tinyperf.sysusers.conf is missing"
        return
    fi
    local root=$work/sysusers-root
    mkdir -p "$root/usr/lib/sysusers.d" "$root/etc"
    cp "$conf" "$root/usr/lib/sysusers.d/tinyperf.conf"
    local out rc=0
    out=$(systemd-sysusers --dry-run --root="$root" tinyperf.conf 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q 'tinyperf\.conf:'; then
        fail "systemd/tinyperf.sysusers.conf: systemd-sysusers (rc=$rc)" "$out"
    elif ! printf '%s\n' "$out" | grep -q "Creating group 'tinyperf'"; then
        fail "systemd/tinyperf.sysusers.conf does not create group tinyperf" "$out"
    elif ! printf '%s\n' "$out" | grep -q "Creating user 'tinyperf'"; then
        fail "systemd/tinyperf.sysusers.conf does not create user tinyperf" "$out"
    else
        pass "systemd/tinyperf.sysusers.conf"
    fi
}

# --- tmpfiles ---------------------------------------------------------------------------
# Installed as /usr/lib/tmpfiles.d/tinyperf.conf; applied to a scratch root that holds
# the files it names and whose /etc/group has tinyperf, it must apply without a word,
# and give the token its owner and mode.
lint_tmpfiles() {
    local conf=$source_root/systemd/tinyperf.tmpfiles.conf
    if [ ! -f "$conf" ]; then
        fail "systemd/tinyperf.tmpfiles.conf is missing"
        return
    fi
    local root=$work/tmpfiles-root
    mkdir -p "$root/usr/lib/tmpfiles.d" "$root/etc/tinyperf" "$root/var/lib/systemd"
    cp "$conf" "$root/usr/lib/tmpfiles.d/tinyperf.conf"
    echo 'tinyperf:x:60100:' >"$root/etc/group"
    echo 'tinyperf:x:60100:60100::/var/lib/tinyperf:/usr/sbin/nologin' >"$root/etc/passwd"
    echo secret >"$root/etc/tinyperf/token"
    chmod 0600 "$root/etc/tinyperf/token"
    local out rc=0
    # shellcheck disable=SC2016 # "$1" is expanded by the inner shell
    out=$("${namespace[@]}" sh -c "set -e
        $(box_accounts)
        "'systemd-tmpfiles --root="$1" --create tinyperf.conf' lint "$root" 2>&1) || rc=$?
    # systemd-tmpfiles --root takes the group's id from the scratch root's /etc/group.
    local token
    token=$(stat -c '%a %g' "$root/etc/tinyperf/token" 2>/dev/null || echo missing)
    [ "$token" = "640 60100" ] && token="640 tinyperf"
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        fail "systemd/tinyperf.tmpfiles.conf: systemd-tmpfiles (rc=$rc)" "$out"
    elif [ "$(id -u)" -eq 0 ] && [ "$token" != "640 tinyperf" ]; then
        fail "systemd/tinyperf.tmpfiles.conf leaves the token $token, not 640 group tinyperf"
    else
        pass "systemd/tinyperf.tmpfiles.conf"
    fi
}

# --- D-Bus policy and activation file ---------------------------------------------------
# A private dbus-daemon whose configuration includes the policy and whose service
# directory holds the activation file: it refuses to start on a bad policy, and lists
# the name as activatable only when the activation file is sound.
lint_dbus() {
    local policy=$source_root/systemd/org.tinyperf.Agent1.conf
    local activation=$source_root/systemd/org.tinyperf.Agent1.service
    local name=org.tinyperf.Agent1
    if [ ! -f "$policy" ] && [ ! -f "$activation" ]; then
        skip "systemd/$name.conf and systemd/$name.service are not in this tree"
        return
    fi
    [ -f "$policy" ] || skip "systemd/$name.conf is not in this tree"
    [ -f "$activation" ] || skip "systemd/$name.service is not in this tree"

    local dir=$work/bus
    mkdir -p "$dir/services"
    local include=
    if [ -f "$policy" ]; then
        include="<include ignore_missing=\"no\">$policy</include>"
    fi
    if [ -f "$activation" ]; then
        cp "$activation" "$dir/services/$name.service"
    fi
    cat >"$dir/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$dir/socket</listen>
  <auth>EXTERNAL</auth>
  <servicedir>$dir/services</servicedir>
  <policy context="default">
    <allow send_destination="org.freedesktop.DBus"/>
    <allow receive_sender="org.freedesktop.DBus"/>
  </policy>
  $include
</busconfig>
EOF
    dbus-daemon --config-file="$dir/bus.conf" --nofork --nopidfile --nosyslog \
        --print-address=1 >"$dir/address" 2>"$dir/stderr" &
    bus_pid=$!
    local waited=0
    while [ ! -s "$dir/address" ] && kill -0 "$bus_pid" 2>/dev/null && [ "$waited" -lt 50 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ ! -s "$dir/address" ]; then
        kill "$bus_pid" 2>/dev/null || true
        wait "$bus_pid" 2>/dev/null || true
        bus_pid=
        fail "systemd/$name.conf: dbus-daemon refused the configuration" "$(cat "$dir/stderr")"
        return
    fi

    local listed=ok
    if [ -f "$activation" ]; then
        local names
        names=$(dbus-send --bus="unix:path=$dir/socket" --print-reply \
            --dest=org.freedesktop.DBus /org/freedesktop/DBus \
            org.freedesktop.DBus.ListActivatableNames 2>&1) || true
        if ! printf '%s\n' "$names" | grep -q "\"$name\""; then
            listed=
        fi
    fi
    kill "$bus_pid" 2>/dev/null || true
    wait "$bus_pid" 2>/dev/null || true
    bus_pid=

    # What dbus-daemon may say about a sound configuration on a lint host: it cannot
    # raise its fd limit as non-root, and user and group tinyperf exist only on the box.
    local complaints
    complaints=$(grep -v -e 'Failed to set fd limit' \
        -e 'Unknown group "tinyperf" in message bus configuration file' \
        -e 'Unknown username "tinyperf" in message bus configuration file' \
        "$dir/stderr" || true)
    if [ -n "$complaints" ]; then
        fail "systemd/$name.conf: dbus-daemon complained" "$complaints"
        return
    fi
    [ -f "$policy" ] && pass "systemd/$name.conf"

    if [ -f "$activation" ]; then
        if [ -z "$listed" ]; then
            fail "systemd/$name.service: dbus-daemon does not list $name as activatable" \
                "$(cat "$activation")"
            return
        fi
        # dbus-daemon hands system-bus activation to systemd; the unit must be ours.
        local unit
        unit=$(sed -n 's/^SystemdService=//p' "$activation")
        if [ -z "$unit" ]; then
            fail "systemd/$name.service: no SystemdService= line"
        elif [ "$unit" != tinyperf.service ]; then
            fail "systemd/$name.service: SystemdService=$unit, expected tinyperf.service"
        else
            pass "systemd/$name.service"
        fi
    fi
}

# --- udev rules -------------------------------------------------------------------------
# udev 252 (Debian 12) has no `udevadm verify`, and `udevadm test` reports parse errors
# on stderr but still exits 0. So the rules go into /run/udev/rules.d inside a private
# mount namespace (the host's rules and devices are untouched), `udevadm test` reads
# them for one device, and any line it prints against our file fails the lint. It does
# not notice a missing comma between tokens, which udev then reads as one garbled token;
# syntax_of_udev_rules checks that shape itself.
udev_token='[A-Z_]+(\{[^}]*\})?[[:space:]]*(==|!=|\+=|-=|:=|=)[[:space:]]*"[^"]*"'
udev_rule="^[[:space:]]*${udev_token}([[:space:]]*,[[:space:]]*${udev_token})*[[:space:]]*$"

syntax_of_udev_rules() {
    local file=$1 number=0 line errors=
    while IFS= read -r line || [ -n "$line" ]; do
        number=$((number + 1))
        if [[ $line =~ ^[[:space:]]*(#.*)?$ ]]; then
            continue
        fi
        if ! [[ $line =~ $udev_rule ]]; then
            errors+="line $number: not KEY op \"value\" tokens separated by commas: $line"$'\n'
        fi
    done <"$file"
    printf '%s' "$errors"
}

lint_udev_rules() {
    local rules=$source_root/udev/70-tinyperf.rules
    if [ ! -f "$rules" ]; then
        fail "udev/70-tinyperf.rules is missing"
        return
    fi
    local errors
    errors=$(syntax_of_udev_rules "$rules")
    if [ -n "$errors" ]; then
        fail "udev/70-tinyperf.rules: syntax" "$errors"
        return
    fi

    local installed=/run/udev/rules.d/70-tinyperf.rules
    # A tmpfs over /run gives an empty /run/udev/rules.d; one over /etc/udev/rules.d
    # hides a locally installed copy that would shadow ours. "$1" is expanded by the
    # inner shell.
    # shellcheck disable=SC2016
    local script='
        set -e
        '"$(box_accounts)"'
        mount -t tmpfs tmpfs /run
        if [ -d /etc/udev/rules.d ]; then mount -t tmpfs tmpfs /etc/udev/rules.d; fi
        mkdir -p /run/udev/rules.d
        cp "$1" /run/udev/rules.d/70-tinyperf.rules
        udevadm test --action=add /sys/class/mem/null 2>&1
    '
    local out rc=0
    out=$("${namespace[@]}" sh -c "$script" lint "$rules" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "lint-system-files: cannot run udevadm test in a private mount namespace" \
            "(needs root or user namespaces; rc=$rc):" >&2
        printf '%s\n' "$out" | tail -n 5 >&2
        exit 2
    fi
    if ! printf '%s\n' "$out" | grep -qF "Reading rules file: $installed"; then
        fail "udev/70-tinyperf.rules: udevadm test did not read the rules" \
            "$(printf '%s\n' "$out" | tail -n 5)"
        return
    fi
    local complaints
    complaints=$(printf '%s\n' "$out" | grep -F "$installed:" || true)
    if [ -n "$complaints" ]; then
        fail "udev/70-tinyperf.rules: udevadm" "$complaints"
        return
    fi
    pass "udev/70-tinyperf.rules"
}

echo "lint-system-files: $source_root (binary $binary)"
lint_unit
lint_factory_reset_units
lint_update_units
lint_sysusers
lint_tmpfiles
lint_dbus
lint_udev_rules

if [ "$failures" -gt 0 ]; then
    echo "lint-system-files: $failures failed" >&2
    exit 1
fi
echo "lint-system-files: all passed"
