# The developer loop. CMakeLists.txt is the real build; this file only drives it.
#   make          configure (Ninja, into build/) and build everything
#   make test     install missing Debian packages, build, run every test (ctest)
#   make demo     install missing Debian packages, build, write the demo's model and dataset
#                 (gl-make-demo) and train a LoRA on them with sdtrain (into DEMO_DIR=build/demo)
#   make bench    build and run the Google Benchmark programs (bench/*.cpp)
#   make deps     install the Debian packages the build needs, those that are missing
#   make sanitize build the library and the tests of untrusted input with ASan + UBSan (CPU only,
#                 in SAN_BUILD=build-san) and run them (cmake/GlSanitize.cmake says which)
#   make install  install the library, headers and CMake package under PREFIX
# Variables (make VAR=value): BUILD=build  BUILD_TYPE=Release  JOBS=<cores>
#   GL_CUDA=AUTO|ON|OFF  GL_CUDA_ARCHS="80;90a"  (both are remembered in the build folder's cache)
#   CMAKE_ARGS=...  CTEST_ARGS=...  DEMO_ARGS=... (more sdtrain options)  DEMO_STEPS=300
#   DEMO_DIR=$(BUILD)/demo  BENCH_ARGS=...  PREFIX=/usr/local

BUILD         ?= build
SAN_BUILD     ?= build-san
BUILD_TYPE    ?= Release
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
GL_CUDA       ?=
GL_CUDA_ARCHS ?=
CMAKE_ARGS    ?=
CTEST_ARGS    ?=
DEMO_ARGS     ?=
DEMO_STEPS    ?= 300
DEMO_DIR      ?= $(BUILD)/demo
BENCH_ARGS    ?=
PREFIX        ?= /usr/local

CONFIGURE_FLAGS := -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	$(if $(GL_CUDA),-DGL_CUDA=$(GL_CUDA)) \
	$(if $(GL_CUDA_ARCHS),"-DGL_CUDA_ARCHS=$(GL_CUDA_ARCHS)") \
	$(CMAKE_ARGS)

# Packages the build needs. "pkg:cmd" entries count as present when cmd is on PATH
# (a cmake or compiler installed some other way will do).
DEB_PACKAGES := cmake:cmake ninja-build:ninja g++:g++ doctest-dev nlohmann-json3-dev libstb-dev \
	libbenchmark-dev libtomlplusplus-dev libcli11-dev libwebp-dev libjpeg62-turbo-dev libpng-dev

.PHONY: all build configure test sanitize sanitize-build demo bench deps install clean distclean
.NOTPARALLEL:

all: build

configure:
	@command -v cmake >/dev/null 2>&1 || { echo "make: cmake not found; run 'make deps'" >&2; exit 1; }
	@if [ -f $(BUILD)/CMakeCache.txt ]; then gen=""; else \
	  command -v ninja >/dev/null 2>&1 || { echo "make: ninja not found; run 'make deps'" >&2; exit 1; }; \
	  gen="-G Ninja"; fi; \
	cmake -S . -B $(BUILD) $$gen $(CONFIGURE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 900 $(CTEST_ARGS)

sanitize-build:
	@$(MAKE) --no-print-directory deps
	@if [ -f $(SAN_BUILD)/CMakeCache.txt ]; then gen=""; else gen="-G Ninja"; fi; \
	cmake -S . -B $(SAN_BUILD) $$gen -DGL_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build $(SAN_BUILD) -j $(JOBS) --target gl-san-tests

sanitize: sanitize-build
	ctest --test-dir $(SAN_BUILD) -L sanitize --output-on-failure --timeout 1800

# The demo downloads nothing: gl-make-demo writes a tiny SD1.5-architecture model, a dataset of
# coloured shapes and sample prompts; sdtrain caches latents, trains a LoRA (LoCon) for DEMO_STEPS
# steps on the GPU when there is one (else the CPU: about 100 s of CPU time), samples every 100
# steps (euler_a: kohya's ddim clips the predicted latents to [-1, 1], which leaves the demo's
# samples noisy), keeps metrics.jsonl and report.html, and prints where the LoRA, the samples and
# the report are. DEMO_DIR/output is replaced on every run.
demo:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory configure
	cmake --build $(BUILD) -j $(JOBS) --target gl-sdtrain gl-make-demo
	$(BUILD)/gl-make-demo $(DEMO_DIR)
	rm -rf $(DEMO_DIR)/output
	$(BUILD)/sdtrain --pretrained_model_name_or_path $(DEMO_DIR)/model \
	  --train_data_dir $(DEMO_DIR)/dataset --caption_extension .txt \
	  --resolution 128 --enable_bucket --min_bucket_reso 64 --max_bucket_reso 256 --bucket_reso_steps 32 \
	  --cache_latents --cache_text_encoder_outputs --network_train_unet_only \
	  --network_module networks.lora --network_dim 16 --network_alpha 16 \
	  --network_args conv_dim=16 conv_alpha=16 \
	  --train_batch_size 4 --max_train_steps $(DEMO_STEPS) --learning_rate 1e-3 --seed 1 \
	  --sample_prompts $(DEMO_DIR)/prompts.txt --sample_sampler euler_a --sample_at_first \
	  --sample_every_n_steps 100 --save_every_n_steps 100 \
	  --output_dir $(DEMO_DIR)/output --output_name demo $(DEMO_ARGS)
	@echo "make demo: done; open the report (the path above) in a browser: loss and learning-rate" \
	      "curves, the samples of every 100 steps, the memory plan, the configuration"

bench:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory configure
	cmake --build $(BUILD) -j $(JOBS) --target bench
	@found=0; for b in $(BUILD)/bench/*; do \
	  [ -x "$$b" ] || continue; found=1; echo "== $$b"; "$$b" $(BENCH_ARGS) || exit 1; done; \
	[ $$found = 1 ] || echo "bench: no benchmark programs were built (bench/*.cpp, Google Benchmark)"

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	@if [ -f $(BUILD)/CMakeCache.txt ]; then cmake --build $(BUILD) --target clean; fi

distclean:
	rm -rf $(BUILD)

deps:
	@missing=""; \
	if ! command -v dpkg >/dev/null 2>&1; then \
	  echo "make deps: not a Debian system (no dpkg), so nothing is installed. The build needs: cmake >= 3.20," \
	       "ninja, g++ >= 12, doctest, nlohmann-json, stb, toml++, CLI11, libwebp, libjpeg-turbo, libpng and (for 'make bench')" \
	       "Google Benchmark; the runtime alone (CMAKE_ARGS=\"-DGL_BUILD_TOOLS=OFF -DGL_BUILD_TESTS=OFF\") needs only nlohmann-json."; \
	  exit 0; \
	fi; \
	for entry in $(DEB_PACKAGES); do \
	  pkg=$${entry%%:*}; cmd=$${entry#*:}; \
	  if [ "$$cmd" != "$$entry" ] && command -v "$$cmd" >/dev/null 2>&1; then continue; fi; \
	  dpkg -s "$$pkg" 2>/dev/null | grep -q '^Status: install ok installed' && continue; \
	  missing="$$missing $$pkg"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	echo "make deps: missing Debian packages:$$missing"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make deps: apt-get is not available; install these packages yourself:$$missing" >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else \
	  echo "make deps: not root and no sudo. Ask an administrator to run:" >&2; \
	  echo "  apt-get update && apt-get install -y$$missing" >&2; exit 1; \
	fi; \
	echo "make deps: running $${sudo:+sudo }apt-get update && $${sudo:+sudo }apt-get install -y$$missing"; \
	$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing \
	  || { echo "make deps: installing$$missing failed (see above)" >&2; exit 1; }
