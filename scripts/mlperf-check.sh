#!/usr/bin/env bash
# Runs MLCommons' checkers (the mlperf-logging package from PyPI, in a virtual environment
# made on first use) on tinyperf's output, with the last ruleset that has ResNet.
#
#   scripts/mlperf-check.sh compliance LOGFILE    MLLOG compliance, closed ResNet, training 4.0.0
#   scripts/mlperf-check.sh system-desc JSONFILE  system description, training 4.0.0
#   scripts/mlperf-check.sh package ORGDIR        submission package checker, training 4.0.0
#   scripts/mlperf-check.sh summarize ORGDIR      result summarizer, training 4.0.0 (prints its table)
#   scripts/mlperf-check.sh python                prints the environment's python (makes it first)
#
# Exits 0 only when the checker reports success. The environment lives at $TINYPERF_VENV,
# else .venv in the repository root.
set -euo pipefail

MLPERF_LOGGING_VERSION=4.1.68
RULESET=4.0.0

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TINYPERF_VENV:-$repo_root/.venv}
python_bin=${PYTHON:-python3}

usage() {
	sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

die() {
	echo "mlperf-check: $*" >&2
	exit 1
}

installed_version() {
	"$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mlperf-logging"))' 2>/dev/null || true
}

ensure_venv() {
	# Checks run in parallel (cargo test); one of them makes the environment.
	local lock
	lock=${TMPDIR:-/tmp}/mlperf-check-$(printf '%s' "$venv" | cksum | cut -d' ' -f1).lock
	exec 9>"$lock"
	flock 9 || die "cannot lock $lock"
	make_venv
	flock -u 9
}

make_venv() {
	if [[ -x $venv/bin/python && $(installed_version) == "$MLPERF_LOGGING_VERSION" ]]; then
		return
	fi
	command -v "$python_bin" >/dev/null || die "$python_bin not found: install python3 (Debian: apt-get install python3 python3-venv)"
	if [[ ! -x $venv/bin/pip ]]; then
		echo "mlperf-check: creating $venv" >&2
		rm -rf "$venv"
		"$python_bin" -m venv "$venv" >&2 ||
			die "cannot create a virtual environment at $venv (Debian: apt-get install python3-venv)"
	fi
	echo "mlperf-check: installing mlperf-logging==$MLPERF_LOGGING_VERSION from PyPI" >&2
	"$venv/bin/pip" install --quiet --disable-pip-version-check "mlperf-logging==$MLPERF_LOGGING_VERSION" >&2 ||
		die "cannot install mlperf-logging==$MLPERF_LOGGING_VERSION from PyPI into $venv (is PyPI reachable?)"
	[[ $(installed_version) == "$MLPERF_LOGGING_VERSION" ]] ||
		die "mlperf-logging $MLPERF_LOGGING_VERSION is not importable from $venv after installing it"
}

# Runs a checker in a scratch directory (the checkers write their own log files into the
# current one), prints its output, and succeeds only when `pattern` is in it.
run_checker() {
	local pattern=$1
	shift
	local scratch output status=0
	scratch=$(mktemp -d)
	trap 'rm -rf "$scratch"' RETURN
	output=$(cd "$scratch" && "$venv/bin/python" -m "$@" 2>&1) || status=$?
	printf '%s\n' "$output"
	if [[ $status -ne 0 ]]; then
		echo "mlperf-check: FAILED (the checker exited with $status)" >&2
		return 1
	fi
	if ! grep -qE "$pattern" <<<"$output"; then
		echo "mlperf-check: FAILED (the checker did not report success)" >&2
		return 1
	fi
}

[[ $# -ge 1 ]] || usage
command=$1
shift

case $command in
compliance)
	[[ $# -eq 1 ]] || usage
	file=$(realpath -e -- "$1") || die "no such log file: $1"
	ensure_venv
	# The checker exits 1 on failure; it also prints `ERROR - FAILED` then.
	run_checker '^INFO - SUCCESS$' mlperf_logging.compliance_checker \
		--usage training --ruleset "$RULESET" --log_output compliance_checker.log "$file"
	;;
system-desc)
	[[ $# -eq 1 ]] || usage
	file=$(realpath -e -- "$1") || die "no such system description: $1"
	ensure_venv
	# This checker exits 0 whatever it finds; only its message tells.
	run_checker 'System description checker passed' mlperf_logging.system_desc_checker \
		--log_output system_desc_checker.log "$file" training "$RULESET"
	;;
package)
	[[ $# -eq 1 ]] || usage
	dir=$(realpath -e -- "$1") || die "no such package: $1"
	ensure_venv
	# Exits 0 whatever it finds; only its last verdict tells.
	run_checker 'PACKAGE CHECKER FOUND NO ERRORS, SUCCESS' mlperf_logging.package_checker \
		--log_output package_checker.log "$dir" training "$RULESET"
	;;
summarize)
	[[ $# -eq 1 ]] || usage
	dir=$(realpath -e -- "$1") || die "no such package: $1"
	ensure_venv
	scratch=$(mktemp -d)
	trap 'rm -rf "$scratch"' EXIT
	# It prints only headings; the scores go to summary.json in the current folder.
	(cd "$scratch" && "$venv/bin/python" -m mlperf_logging.result_summarizer "$dir" training "$RULESET") ||
		die "the result summarizer failed"
	[[ -s $scratch/summary.json ]] || die "the result summarizer wrote no summary"
	cat "$scratch/summary.json"
	;;
python)
	[[ $# -eq 0 ]] || usage
	ensure_venv
	echo "$venv/bin/python"
	;;
*)
	usage
	;;
esac
