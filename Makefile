# Prescient: top-level tasks. `make help` lists them.
CARGO ?= cargo
SIM := target/release/prescient-sim
TRACES := sim/traces

.PHONY: help setup build demo test lint unit bench sweep clean kmod kmod-clean vm-kernel vm-test real-uvm e2e install dkms dkms-stage dkms-version package package-test deploy-check rules-test image image-test systemd-test

# The kernel module builds against a Rust-enabled kernel tree: the one
# vm-tests/kernel.sh keeps in its cache, unless KDIR says otherwise.
KDIR ?= $(shell vm-tests/kernel.sh --print-kdir 2>/dev/null)
LLVM ?= -19

help:
	@echo "make demo    set up, build, then replay a real DNN trace: driver vs Prescient vs oracle (plot in out/demo.svg), and prescient.ko in QEMU"
	@echo "make test    set up, then the format check, clippy -D warnings, the shape check, the alert-rule checks, the package checks (clean root, real systemd, container image), the chart checks, the VM tests, every workspace test"
	@echo "make setup   install what building and testing need (toolchain parts, cargo-nextest, crates, VM-test packages); demo and test run it"
	@echo "make build   build everything, release"
	@echo "make package out/prescient_<version>_<arch>.deb (binaries, unit, sysusers group, config, man pages, completions) and out/prescient-dkms_<version>_all.deb (prescient.ko's source for DKMS)"
	@echo "make systemd-test the .deb under a real systemd (PID 1 in systemd-nspawn): start, status, group, socket, restart, stop"
	@echo "make image   out/prescient-image_<version>.oci.tar: deploy/Containerfile's image, built without a container daemon (umoci); make image-test checks it"
	@echo "make kmod    build prescient.ko (KDIR=<kernel tree>, default: the cached VM kernel)"
	@echo "make vm-test build the VM kernel (cached), the module, the stand-in driver; boot QEMU; run the scenarios; then make e2e"
	@echo "make e2e     prescient.ko + prescientd + prescientctl in QEMU, scraped by a real Prometheus on the host"
	@echo "make real-uvm prescient.ko with the REAL nvidia-uvm (Debian's 550) in a KASAN+kmemleak guest; the DKMS build test"
	@echo "make dkms    install the source to /usr/src/prescient-<version> and build/install prescient.ko with dkms (root)"
	@echo "make install install the binaries, the runtime prescientctl run preloads, the systemd unit (vendor dir), the sysusers group, the sample config, man pages (prescientd.toml(5) too), completions (DESTDIR, PREFIX)"
	@echo "make bench   criterion benchmarks of the engine"
	@echo "make sweep   DeepUM's table-parameter study on the five bundled traces"

# Toolchain parts, cargo-nextest, crates, and the VM tests' packages
# (clang-19, qemu, linux-source-6.12, bindgen: vm-tests/deps.sh; needs root).
# `make demo` and `make test` run it first, so a fresh machine needs only
# those two commands; each step is quick when its work is already done.
setup:
	rustup show active-toolchain
	rustup component add rustfmt clippy rust-src
	command -v cargo-nextest >/dev/null || $(CARGO) install --locked cargo-nextest
	$(CARGO) fetch --locked
	vm-tests/deps.sh

# The workspace, the Rust-enabled VM kernel (built once, then cached by key
# under $${PRESCIENT_CACHE:-~/.cache/prescient}) and prescient.ko.
build: setup
	$(CARGO) build --release --workspace --locked
	vm-tests/kernel.sh
	$(MAKE) kmod KDIR=$$(vm-tests/kernel.sh --print-kdir)

# 1. the simulator on G10's BERT trace: driver vs Prescient vs oracle;
# 2. prescient.ko in a QEMU guest, replaying the same trace (scaled down)
#    through the nvidia_uvm stand-in, without and with the module.
demo: build
	@mkdir -p out
	$(SIM) run --trace $(TRACES)/BERT_256.kernels.txt.gz --gpu-mem 40GiB --h2d 15.754GB/s \
		--d2h 15.754GB/s --fault-latency 45us --iterations 3 --plot out/demo.svg
	@echo "plot: out/demo.svg"
	@echo "--- prescient.ko in QEMU: faults per iteration without and with the module ---"
	@vm-tests/run.sh > out/vm-demo.log 2>&1; rc=$$?; \
		grep -E '^replay: (baseline|with-prescient) iter|fault-cut|^vm-tests:' out/vm-demo.log | head -40; \
		echo "full log: out/vm-demo.log"; exit $$rc

# tools/shape.py: no non-test function over 80 lines, no import cycle.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	python3 tools/shape.py

unit:
	$(CARGO) nextest run --workspace --locked --no-fail-fast

# The VM tests first: the workspace tests' summary ends the run. VMTEST
# dkms-build builds prescient.ko from the prescient-dkms package made by
# package-test (DKMS_DEB; `make real-uvm` alone stages the tree instead).
test: setup lint rules-test package-test systemd-test image-test deploy-check vm-test unit
test: export DKMS_DEB = $(CURDIR)/out/prescient-dkms_$(DKMS_VERSION)_all.deb

# The alert rules against their promtool unit tests.
rules-test:
	promtool check rules packaging/prometheus/prescient.rules.yml
	cd packaging/prometheus && promtool test rules prescient.rules.test.yml

# The container image of deploy/Containerfile without a container daemon
# (umoci over a debootstrap'd Debian 12): out/prescient-image_<version>.oci.tar.
image: package
	deploy/image.sh out

# The image, unpacked, checked: config, name = the chart's, files, --check-config.
image-test: image
	deploy/image-check.sh out

# The .deb under a real systemd (PID 1 in systemd-nspawn): start, status,
# sysusers group, socket, restart, stop (tests/systemd/run.sh).
systemd-test: package
	tests/systemd/run.sh out

# The Helm chart: lint, render, refuse bad values, validate every manifest.
deploy-check:
	deploy/check.sh

# The .deb, from the release binaries.
package:
	$(CARGO) build --release --locked -p prescientd -p prescientctl -p prescient-sim -p prescient-runtime
	packaging/deb/build.sh out

# The .deb installed into a clean Debian 12 root (cached), checked from there.
package-test: package
	packaging/deb/test.sh out

kmod:
	@test -n "$(KDIR)" -a -f "$(KDIR)/Makefile" || { echo "make kmod: KDIR=<kernel build tree> needed (make vm-kernel builds one)"; exit 1; }
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) modules

kmod-clean:
	@test -n "$(KDIR)" && $(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) clean

vm-kernel:
	vm-tests/deps.sh
	vm-tests/kernel.sh

# The module's scenarios, the real-driver scenarios, then the end-to-end test; all always run.
vm-test:
	@rc=0; vm-tests/boot-test.sh || rc=1; vm-tests/run.sh || rc=1; vm-tests/real-uvm/run.sh || rc=1; tests/e2e/run.sh || rc=1; exit $$rc

# The real nvidia-uvm (vm-tests/real-uvm/) in the KASAN + kmemleak guest, and `dkms-build`.
real-uvm:
	vm-tests/real-uvm/run.sh

# DKMS (packaging/dkms): the module's source tree as dkms wants it, under $(DKMS_SRC).
DKMS_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DKMS_SRC ?= $(DESTDIR)/usr/src/prescient-$(DKMS_VERSION)
dkms-version:
	@echo $(DKMS_VERSION)
dkms-stage:
	rm -rf $(DKMS_SRC) && mkdir -p $(DKMS_SRC)/core $(DKMS_SRC)/uapi $(DKMS_SRC)/tools/uvm-layouts $(DKMS_SRC)/packaging/dkms
	cp -r Kbuild kmod $(DKMS_SRC)/
	# A tree `make kmod` built in holds its outputs (.gitignore's list): not source.
	find $(DKMS_SRC) \( -name '*.o' -o -name '*.ko' -o -name '*.mod' -o -name '*.mod.c' -o -name '.*.cmd' \
		-o -name '*.rmeta' -o -name modules.order -o -name Module.symvers \) -delete
	cp -r core/src $(DKMS_SRC)/core/ && cp -r uapi/src $(DKMS_SRC)/uapi/
	cp tools/uvm-layouts/uvm-layouts.sh tools/uvm-layouts/lib.sh tools/uvm-layouts/layouts.c tools/uvm-layouts/fields.h $(DKMS_SRC)/tools/uvm-layouts/
	cp packaging/dkms/build.sh $(DKMS_SRC)/packaging/dkms/
	sed 's/@VERSION@/$(DKMS_VERSION)/' packaging/dkms/dkms.conf > $(DKMS_SRC)/dkms.conf
# For the running kernel (KVER=...: another); build.sh refuses in one line what it cannot build.
KVER ?= $(shell uname -r)
dkms: dkms-stage
	dkms remove -m prescient -v $(DKMS_VERSION) --all >/dev/null 2>&1 || true
	dkms add -m prescient -v $(DKMS_VERSION)
	dkms install -m prescient -v $(DKMS_VERSION) -k $(KVER)

e2e:
	tests/e2e/run.sh

PREFIX ?= /usr
# The same files as the .deb (packaging/deb/build.sh stages them), into DESTDIR.
install:
	$(CARGO) build --release --locked -p prescientd -p prescientctl -p prescient-sim -p prescient-runtime
	install -D -m 755 target/release/prescientd $(DESTDIR)$(PREFIX)/sbin/prescientd
	install -D -m 755 target/release/prescientctl $(DESTDIR)$(PREFIX)/bin/prescientctl
	install -D -m 755 target/release/prescient-sim $(DESTDIR)$(PREFIX)/bin/prescient-sim
	# prescientctl run finds the runtime in ../lib/prescient beside its own directory.
	install -D -m 755 target/release/libprescient_runtime.so $(DESTDIR)$(PREFIX)/lib/prescient/libprescient_runtime.so
	# ... and the torch helper's sitecustomize beside the runtime (built against torch at first use).
	install -D -m 644 runtime/python/sitecustomize.py $(DESTDIR)$(PREFIX)/lib/prescient/python/sitecustomize.py
	install -D -m 644 runtime/python/prescient_torch/__init__.py $(DESTDIR)$(PREFIX)/lib/prescient/python/prescient_torch/__init__.py
	install -D -m 644 runtime/python/prescient_torch/marks.cpp $(DESTDIR)$(PREFIX)/lib/prescient/python/prescient_torch/marks.cpp
	install -D -m 644 packaging/prescientd.service $(DESTDIR)$(PREFIX)/lib/systemd/system/prescientd.service
	install -D -m 644 packaging/prescient.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/prescient.conf
	test -e $(DESTDIR)/etc/prescient/prescientd.toml || install -D -m 644 packaging/prescientd.toml $(DESTDIR)/etc/prescient/prescientd.toml
	target/release/prescientctl man --out-dir $(DESTDIR)$(PREFIX)/share/man/man1
	target/release/prescient-sim man --out-dir $(DESTDIR)$(PREFIX)/share/man/man1
	target/release/prescientd man --out-dir $(DESTDIR)$(PREFIX)/share/man/man8
	target/release/prescientd man --config-file --out-dir $(DESTDIR)$(PREFIX)/share/man/man5
	mkdir -p $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	for b in prescientd prescientctl prescient-sim; do \
		target/release/$$b completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$b; \
		target/release/$$b completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_$$b; \
		target/release/$$b completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/$$b.fish; \
	done
	-[ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null && systemd-sysusers $(PREFIX)/lib/sysusers.d/prescient.conf

bench:
	$(CARGO) bench -p prescient-core --bench engine

sweep: build
	$(SIM) sweep --transparent-too $(foreach t,BERT_256 VIT_1280 Inceptionv3_1536 ResNet152_1280 SENet154_1024,--trace $(TRACES)/$(t).kernels.txt.gz)

clean:
	$(CARGO) clean
	rm -rf out
