# tinyperf: build, test, run, install, lint, bench.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
DESTDIR ?=
PREFIX ?= /usr
RELEASE_BIN := target/release/tinyperf
DEBUG_BIN := target/debug/tinyperf

# Debian packages the tests need: a real dbus-daemon, busctl and systemd-analyze,
# systemd-journal-remote to write real journal files of a previous boot (read by journalctl),
# udevadm, a C compiler for the fake GPU driver libraries, a C++ compiler to check the GPU kernel source, curl for HTTP checks, Python with
# venv for mlperf-logging's checkers (installed from PyPI into .venv) and for Selenium (into .venv-browser),
# Chromium and its WebDriver with a font for the browser tests, the hiprtc of ROCm 5.2
# (in libamdhip64-5) to compile the HIP kernels, util-linux's script for a pseudo-terminal
# (the live progress bars), zsh, fish, mandoc and groff to check the generated completions
# and man pages, and make for `make install`; the build packages come first. Prometheus
# and promtool (Debian's prometheus package, unpacked, never installed as a service) come
# from scripts/prometheus-tools.sh.
TEST_PACKAGES := dbus systemd gpg gpgv gpg-agent systemd-journal-remote udev libc6-dev g++ curl util-linux passwd python3 python3-venv \
	libamdhip64-5 libhiprtc-builtins5 chromium chromium-driver fonts-dejavu-core \
	zsh fish mandoc groff-base make

# Builds made here embed uPlot (build.rs fetches its npm tarball with curl and checks its
# sha512) or fail; a plain `cargo build` without network builds without charts instead.
export TINYPERF_REQUIRE_UPLOT ?= 1
# The browser tests fail, rather than skip, when Chromium or Selenium is missing.
export TINYPERF_REQUIRE_BROWSER ?= 1

.PHONY: all build build-deps release run test test-deps lint fmt-check clippy fuzz fuzz-check soak bench bench-agent bench-venv gpu-check gpu-speed install image image-rootfs images image-test image-test-all image-test-update clean

all: build

# What a build needs beyond Rust: cmake and nasm compile the bundled libjpeg-turbo; curl
# fetches uPlot's npm tarball for the status page.
BUILD_PACKAGES := cmake nasm gcc curl

# Installs the Debian packages of $(1) that are missing (needs root only when some are).
define apt_install
missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
if [ -n "$$missing" ]; then \
	echo "installing:$$missing"; \
	if [ "$$(id -u)" -ne 0 ]; then echo "need root to install:$$missing" >&2; exit 1; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
fi
endef

build: build-deps
	$(CARGO) build

release: build-deps
	$(CARGO) build --release

build-deps:
	@$(call apt_install,$(BUILD_PACKAGES))

## Build and run `tinyperf run` on whatever this machine has (the CPU, here).
run: release
	$(RELEASE_BIN) run

## Install what the tests need, then run every check and test.
# The smoke tests on real photographs train with the release binary (a debug build
# trains too slowly); the images build the same binary afterwards.
test: test-deps fmt-check clippy build lint release
	$(CARGO) test --all-targets
	$(MAKE) --no-print-directory fuzz-check

## Every fuzz target briefly, from its seeds (fuzz/seeds): a parser that panics, hangs over
## 1 s or takes over 256 MB on them fails. `make fuzz` is the long campaign.
FUZZ_CHECK_SECONDS ?= 5
fuzz-check:
	scripts/fuzz.sh --seconds $(FUZZ_CHECK_SECONDS)

## The fuzz campaign: each target FUZZ_SECONDS (600) seconds, FUZZ_JOBS (1) at a time.
FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 1
fuzz:
	scripts/fuzz.sh --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS)

## A real agent on loopback for SOAK_MINUTES (60) under runs back to back, 20 readers, event
## streams, D-Bus callers and a SIGKILL: RSS and latency over time, runs, errors (out/soak/).
soak: release
	scripts/soak.py $(RELEASE_BIN) --out out/soak

test-deps: build-deps
	@$(call apt_install,$(TEST_PACKAGES))
	@command -v rustfmt >/dev/null || rustup component add rustfmt
	@$(CARGO) clippy --version >/dev/null 2>&1 || rustup component add clippy
	scripts/mlperf-check.sh python >/dev/null
	scripts/nvrtc-lib.sh >/dev/null
	scripts/browser-venv.sh >/dev/null
	scripts/photo-venv.sh >/dev/null
	scripts/prometheus-tools.sh >/dev/null

fmt-check:
	$(CARGO) fmt --check
	$(CARGO) fmt --check --manifest-path fuzz/Cargo.toml

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

## Check the unit (and its exposure, at most 3.0), D-Bus policy, activation file, sysusers,
## tmpfiles and udev rules.
lint: build
	scripts/lint-system-files.sh $(DEBUG_BIN)

## Speed figures, each beside its reference in the same run: the CPU GEMM stage beside the
## CPU's peak, HTTP status latency under 50 clients, the JPEG loader beside Pillow, and ResNet
## training beside PyTorch (a venv with torch is made once in $(BENCH_VENV)).
## On a machine with an NVIDIA or AMD GPU: every kernel and a training step against the CPU
## backend, GEMM TFLOPS, ResNet-50 throughput, and PyTorch's figures when it is installed.
gpu-check: release
	scripts/gpu-check.sh $(RELEASE_BIN) out/gpu-check

## One call on a machine with a GPU: the 16-bit correctness check, then ResNet-50 training
## img/s in f32, fp16, bf16 and each convolution, graph and fused-BN switch, beside PyTorch
## AMP on the same GPU, each under its own timeout; a table last (out/gpu-speed/).
## Builds offline from cargo's cache when it can; BIN=path uses a built binary.
gpu-speed:
	scripts/gpu-speed.sh out/gpu-speed

BENCH_VENV ?= .venv-bench
bench: release bench-venv bench-agent
	scripts/bench-gemm.sh $(RELEASE_BIN)
	scripts/bench-http.sh $(RELEASE_BIN)
	scripts/bench-loader.sh
	PYTHON=$(BENCH_VENV)/bin/python scripts/bench-resnet.sh

## The agent with 1,000 stored tinybox green runs beside the base build (a release worktree of
## BASE, cf9fb8d by default): RSS, and /, /api/v1/runs, /metrics, /api/v1/status and ListRuns
## latency under 50 clients, side by side.
bench-agent: release
	scripts/bench-agent.sh $(RELEASE_BIN)

bench-venv:
	@test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	@$(BENCH_VENV)/bin/python -c 'import torch, torchvision' 2>/dev/null || \
		$(BENCH_VENV)/bin/pip install -q torch torchvision

## Installs the release build, with its shell completions and man pages generated from it;
## BIN=path installs a binary built already instead (the tests install the debug build).
BIN ?=
INSTALL_BIN := $(or $(BIN),$(RELEASE_BIN))
BASH_COMPLETION_DIR := $(DESTDIR)$(PREFIX)/share/bash-completion/completions
ZSH_COMPLETION_DIR := $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions
FISH_COMPLETION_DIR := $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
MAN1_DIR := $(DESTDIR)$(PREFIX)/share/man/man1
install: $(if $(BIN),,release)
	install -Dm755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/tinyperf
	install -d $(BASH_COMPLETION_DIR) $(ZSH_COMPLETION_DIR) $(FISH_COMPLETION_DIR) $(MAN1_DIR)
	$(INSTALL_BIN) completions bash >$(BASH_COMPLETION_DIR)/tinyperf
	$(INSTALL_BIN) completions zsh >$(ZSH_COMPLETION_DIR)/_tinyperf
	$(INSTALL_BIN) completions fish >$(FISH_COMPLETION_DIR)/tinyperf.fish
	$(INSTALL_BIN) man --dir $(MAN1_DIR) >/dev/null
	chmod 644 $(BASH_COMPLETION_DIR)/tinyperf $(ZSH_COMPLETION_DIR)/_tinyperf $(FISH_COMPLETION_DIR)/tinyperf.fish $(MAN1_DIR)/tinyperf*.1
	install -Dm644 systemd/tinyperf.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf.service
	install -Dm644 systemd/tinyperf-factory-reset.path $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-factory-reset.path
	install -Dm644 systemd/tinyperf-factory-reset.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-factory-reset.service
	install -Dm644 systemd/tinyperf-update.path $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-update.path
	install -Dm644 systemd/tinyperf-update.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-update.service
	install -Dm644 systemd/tinyperf-boot-check.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-boot-check.service
	install -Dm644 systemd/tinyperf-boot-rejected.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tinyperf-boot-rejected.service
	install -d $(DESTDIR)$(PREFIX)/lib/tinyperf/sysupdate.d
	install -m644 systemd/sysupdate.d/*.transfer.in $(DESTDIR)$(PREFIX)/lib/tinyperf/sysupdate.d/
	install -Dm644 systemd/org.tinyperf.Agent1.conf $(DESTDIR)$(PREFIX)/share/dbus-1/system.d/org.tinyperf.Agent1.conf
	install -Dm644 systemd/org.tinyperf.Agent1.service $(DESTDIR)$(PREFIX)/share/dbus-1/system-services/org.tinyperf.Agent1.service
	install -Dm644 systemd/tinyperf.sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/tinyperf.conf
	install -Dm644 systemd/tinyperf.tmpfiles.conf $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/tinyperf.conf
	install -Dm644 udev/70-tinyperf.rules $(DESTDIR)$(PREFIX)/lib/udev/rules.d/70-tinyperf.rules
	install -Dm644 systemd/tinyperf.toml $(DESTDIR)/etc/tinyperf/tinyperf.toml

## The flashable OS image (as root on Debian 12): out/image/tinybox-$(VARIANT).raw{,.zst},
## .bmap, .manifest, .SHA256SUMS, .update/ (signed update files). VARIANT=cpu|green|red;
## MIRROR=, SNAPSHOT= pick the archive; UPDATE_SIGNING_KEY= signs the updates (a throwaway
## test key without it); KEEP_ROOTFS=1 keeps the root filesystem tree for re-versioned builds.
VARIANT ?= cpu
VARIANTS := cpu red green
IMAGE_OUT ?= out/image
image:
	image/build.sh --variant $(VARIANT) --out $(IMAGE_OUT)

## Only a variant's root filesystem, as a folder: out/image/tinybox-$(VARIANT).rootfs.
image-rootfs:
	image/build.sh --variant $(VARIANT) --out $(IMAGE_OUT) --rootfs-only

## Every variant's image.
images:
	for v in $(VARIANTS); do image/build.sh --variant $$v --out $(IMAGE_OUT); done

## cpu: boot the image under QEMU (TCG, OVMF) and check the agent from outside and inside.
## red, green: the image's own tinyperf, GPU libraries, firmware and modules, run in a
## chroot of its root filesystem (the .rootfs folder, or the root of the .raw image).
image-test:
	@if [ "$(VARIANT)" = cpu ]; then \
		image/test.sh --image $(IMAGE_OUT)/tinybox-cpu.raw --out out/image-test; \
	else \
		image/test-rootfs.sh --variant $(VARIANT) --in $(IMAGE_OUT) --out out/image-test-$(VARIANT); \
	fi

## make image-test for every variant.
image-test-all:
	for v in $(VARIANTS); do $(MAKE) --no-print-directory image-test VARIANT=$$v; done

## OS updates under QEMU: v2 and v3 built from the cpu image's kept tree (make image
## VARIANT=cpu KEEP_ROOTFS=1), signed update files served to the guest, broken ones
## refused, v2 installed, booted and kept, v3 rejected by its boot check and rolled back.
image-test-update:
	image/test-update.sh --image $(IMAGE_OUT)/tinybox-cpu.raw --out out/image-test-update

clean:
	$(CARGO) clean
