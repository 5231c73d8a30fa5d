# Prescient: top-level tasks. `make help` lists them.
CARGO ?= cargo
SIM := target/release/prescient-sim
TRACES := sim/traces

.PHONY: help setup build demo test lint unit bench sweep clean

help:
	@echo "make setup   install what building and testing need (toolchain parts, cargo-nextest, crates)"
	@echo "make build   build everything, release"
	@echo "make demo    replay a real DNN trace: driver vs Prescient vs oracle, plot in out/demo.svg"
	@echo "make test    format check, clippy -D warnings, every test"
	@echo "make bench   criterion benchmarks of the engine"
	@echo "make sweep   DeepUM's table-parameter study on the five bundled traces"

setup:
	rustup show active-toolchain
	rustup component add rustfmt clippy rust-src
	command -v cargo-nextest >/dev/null || $(CARGO) install --locked cargo-nextest
	$(CARGO) fetch --locked

build:
	$(CARGO) build --release --workspace --locked

demo: build
	@mkdir -p out
	$(SIM) run --trace $(TRACES)/BERT_256.kernels.txt.gz --gpu-mem 40GiB --h2d 15.754GB/s \
		--d2h 15.754GB/s --fault-latency 45us --iterations 3 --plot out/demo.svg
	@echo "plot: out/demo.svg"

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit:
	$(CARGO) nextest run --workspace --locked --no-fail-fast

test: lint unit

bench:
	$(CARGO) bench -p prescient-core --bench engine

sweep: build
	$(SIM) sweep --transparent-too $(foreach t,BERT_256 VIT_1280 Inceptionv3_1536 ResNet152_1280 SENet154_1024,--trace $(TRACES)/$(t).kernels.txt.gz)

clean:
	$(CARGO) clean
	rm -rf out
