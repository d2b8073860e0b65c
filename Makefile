# ration - top-level build. `make run` and `make test` are the two commands.
CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    := -std=c11 -Wall -Wextra -Wshadow -Werror
# The CLI looks for device profiles by name in DATADIR/budgets after
# $RATION_DEVICES and before ./budgets (see --device).
PREFIX  ?= /usr/local
DATADIR := $(PREFIX)/share/ration
CPPFLAGS += -D_POSIX_C_SOURCE=200809L -Icompiler -Iruntime
LDLIBS  := -lglpk -lcjson -lnettle -lm -lpthread
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

# SAN=1: everything (library, CLI, tests) with ASan+UBSan in build/san; the
# CLI goes to build/san/bin/ration and the test target hands it to the shell
# tests as $RATION, so bin/ration stays the release build.
ifeq ($(SAN),1)
CFLAGS  := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
BUILD   := build/san
BIN     := $(BUILD)/bin/ration
else
BUILD   := build/rel
BIN     := bin/ration
endif

# Debian packages the build and tests need; installed when missing.
# libopenblas0-pthread: the CPU kernels' GEMM, loaded at run time from its
# own directory (runtime/kernels_fast.c): the build that may be called from
# several threads at once, whichever BLAS the system's alternatives name.
# man-db, groff-base: t_install.sh renders every installed man page.
DEB_PKGS := libglpk-dev libcjson-dev coinor-libcbc-dev nettle-dev pkg-config python3-torch python3-numpy \
            clang libclang-rt-dev valgrind libopenblas0-pthread man-db groff-base
DEPS_STAMP := build/.deps-ok

# The browser test renders report.html in headless Chromium, which is large:
# installed only for `make test`, not for a plain build.
BROWSER_PKGS := chromium fonts-dejavu-core
BROWSER_STAMP := build/.browser-ok

# The ilp strategy is a folder of its own (compiler/ilp/, one file per concern).
COMPILER_SRC := $(filter-out compiler/main.c,$(wildcard compiler/*.c)) $(wildcard compiler/ilp/*.c)
COMPILER_OBJ := $(COMPILER_SRC:%.c=$(BUILD)/%.o)
RUNTIME_SRC  := $(wildcard runtime/*.c)
RUNTIME_OBJ  := $(RUNTIME_SRC:%.c=$(BUILD)/%.o)
TEST_SRC     := $(wildcard tests/test_*.c)
TEST_BIN     := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

LIBCOMPILER := $(BUILD)/libration-compiler.a
LIBRATION := $(BUILD)/libration.a
# The shared libration: its soname carries the major version.
VERSION := $(shell sed -n 's/^\#define RATION_VERSION "\(.*\)"/\1/p' compiler/ration.h)
SONAME  := libration.so.$(firstword $(subst ., ,$(VERSION)))
LIBSO   := $(BUILD)/libration.so.$(VERSION)

.PHONY: all deps browser-deps run test clean fuzz gpu-prep gpu-check install uninstall FORCE
all: $(BIN) $(LIBRATION) $(LIBSO)
FORCE:

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@mkdir -p build && touch $@

browser-deps: $(BROWSER_STAMP)
$(BROWSER_STAMP):
	@missing=""; for p in $(BROWSER_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@mkdir -p build && touch $@

$(BUILD)/%.o: %.c compiler/ration.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find build -name '*.d' 2>/dev/null)
$(BUILD)/compiler/main.o: CPPFLAGS += -DRATION_DATADIR='"$(DATADIR)/budgets"'
# libration's objects serve the static and the shared library alike:
# position-independent, without semantic interposition so that calls within
# a file still inline as they would in an executable.
# (The stamp is made before them: objects an older Makefile compiled
# without these flags are older than it, so they are compiled again.)
PIC_STAMP := $(BUILD)/runtime/.pic
$(PIC_STAMP):
	@mkdir -p $(dir $@) && touch $@
$(RUNTIME_OBJ): CFLAGS += -fPIC -fno-semantic-interposition
# The fast CPU kernels' loops are written to be vectorized: the vectorizer's
# full cost model (-O2 vectorizes only loops without a scalar remainder),
# sqrtf as one instruction (-fno-math-errno: the kernels never read errno)
# and selects for their ?: (-fno-trapping-math: nor the FP exception flags).
# Neither changes a result.
$(BUILD)/runtime/kernels_fast.o: CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic -fno-math-errno -fno-trapping-math
$(RUNTIME_OBJ): $(PIC_STAMP)


$(LIBCOMPILER): $(COMPILER_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIBRATION): $(RUNTIME_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BIN): $(BUILD)/compiler/main.o $(LIBCOMPILER) $(LIBRATION)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/test.h $(LIBCOMPILER) $(LIBRATION)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(WARN) $(CFLAGS) $(LDFLAGS) -MMD -MP -o $@ $< $(LIBCOMPILER) $(LIBRATION) $(LDLIBS)

# CUDA kernels: built only when nvcc exists; nothing else needs them.
CUDA_HOME ?= /usr/local/cuda
NVCCFLAGS := -O2 -std=c++17 --fmad=false -Iruntime \
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fPIC
LIBCUDA := $(BUILD)/libration_cuda.a
CUDA_OBJ := $(patsubst runtime/cuda/%.cu,$(BUILD)/runtime/cuda/%.o,$(wildcard runtime/cuda/*.cu)) $(BUILD)/runtime/rt_cuda.o
# Where cuBLASLt is (lib64, or lib in pip-style trees): the shared libration
# links it and finds it there at run time.
CUDA_LIB ?= $(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_HOME)/lib64/libcublasLt.so $(CUDA_HOME)/lib/libcublasLt.so))))
ifneq ($(NVCC),)
all: $(LIBCUDA)
test: $(LIBCUDA)
run: $(LIBCUDA)
SO_CUDA := $(CUDA_OBJ)
SO_LIBS := -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcublasLt -lcudart -l:libstdc++.so.6
endif
$(BUILD)/runtime/cuda/%.o: runtime/cuda/%.cu $(wildcard runtime/cuda/*.cuh) runtime/kernels_cuda.h runtime/kernels.h \
                           $(PIC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/runtime/rt_cuda.o: runtime/rt_cuda.cu runtime/rt_backend.h runtime/ration.h runtime/kernels_cuda.h runtime/kernels.h \
                            $(PIC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
# Link it whole (-Wl,--whole-archive): rt_cuda.o replaces rt.c's weak stub.
$(LIBCUDA): $(CUDA_OBJ)
	@rm -f $@; ar rcs $@ $^
# The shared libration holds the CUDA backend too where nvcc built it, and
# exports only the API (runtime/libration.map). Its undefined symbols are
# an error, except under the sanitizers, whose runtime the executable brings.
$(LIBSO): $(RUNTIME_OBJ) $(SO_CUDA) runtime/libration.map
	$(CC) -shared -Wl,-soname,$(SONAME),--version-script=runtime/libration.map \
	  $(if $(filter 1,$(SAN)),,-Wl,--no-undefined) $(LDFLAGS) -o $@ $(RUNTIME_OBJ) $(SO_CUDA) $(SO_LIBS) -lm -lpthread

test: $(BIN) $(TEST_BIN) $(BROWSER_STAMP)
	@BUILD=$(BUILD) RATION=$(BIN) NVCC="$(NVCC)" LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  sh tests/run.sh

# Fuzzing (tests/fuzz/): libFuzzer targets built with clang, ASan and UBSan
# in build/fuzz; each runs FUZZ_SECONDS, seeded from tests/fuzz/SEEDS.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build/fuzz
FUZZ_CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_OBJ     := $(COMPILER_SRC:%.c=$(FUZZ_BUILD)/%.o) $(RUNTIME_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_TARGETS := graph device plan pipeline schedule
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
$(FUZZ_BUILD)/%.o: %.c compiler/ration.h | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(filter-out -Werror,$(WARN)) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/driver.c tests/fuzz/targets.h tests/fuzz/sched_text.h $(FUZZ_OBJ)
	$(FUZZ_CC) $(CPPFLAGS) $(filter-out -Werror,$(WARN)) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_ONE=fuzz_$*_one \
	  -o $@ $< $(FUZZ_OBJ) $(LDLIBS)
# Keep the objects between runs (make would delete them as intermediates).
.SECONDARY: $(FUZZ_OBJ)
fuzz: $(FUZZ_BINS)
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(FUZZ_TARGETS)

run: $(BIN) $(LIBRATION)
	@BUILD=$(BUILD) sh examples/run.sh

# The CUDA backend on a GPU (gpu/README.md): gpu-prep plans every schedule
# here, where GLPK is, into build/gpu/; gpu-check builds with nvcc and gcc
# alone on the GPU machine, checks and measures, and writes its logs to OUT.
OUT ?= build/gpu-out
gpu-prep: $(BIN) $(LIBRATION)
	@BUILD=$(BUILD) RATION=$(BIN) NVCC="$(NVCC)" sh gpu/prep.sh
gpu-check:
	@OUT=$(OUT) bash gpu/check.sh

clean:
	rm -rf build bin

# ---------------------------------------------------------------- install
# `make install [PREFIX=/usr/local] [DESTDIR=]`: the CLI, libration static
# and shared (and the CUDA backend's archive where nvcc built it), its public
# headers, ration.pc, the device profiles where --device looks for them
# (DATADIR/budgets) and the man pages. The installed CLI is linked apart
# from bin/ration, with the DATADIR of this PREFIX, so that installing
# elsewhere leaves the in-tree binary as it is. `make uninstall` (same
# PREFIX and DESTDIR) removes exactly these files and ration's own
# directories; directories that others share (bin, lib, man1) stay.
INST       := $(BUILD)/install
DEST       := $(DESTDIR)$(PREFIX)
PROFILES   := $(notdir $(wildcard budgets/*.json))
MAN_PAGES  := $(notdir $(wildcard docs/man/*.1))
HEADERS    := ration.h kernels.h
INST_LIBS  := libration.a $(notdir $(LIBSO)) $(SONAME) libration.so $(if $(NVCC),$(notdir $(LIBCUDA)))
INST_FILES := bin/ration $(INST_LIBS:%=lib/%) lib/pkgconfig/ration.pc $(HEADERS:%=include/ration/%) \
              $(PROFILES:%=share/ration/budgets/%) $(MAN_PAGES:%=share/man/man1/%)

# Rewritten only when PREFIX changes, so the installed CLI is rebuilt then.
$(INST)/prefix: FORCE
	@mkdir -p $(dir $@); echo '$(PREFIX)' | cmp -s - $@ || echo '$(PREFIX)' >$@
$(INST)/main.o: compiler/main.c compiler/ration.h $(INST)/prefix | $(DEPS_STAMP)
	$(CC) $(CPPFLAGS) -DRATION_DATADIR='"$(DATADIR)/budgets"' $(WARN) $(CFLAGS) -c $< -o $@
$(INST)/ration: $(INST)/main.o $(LIBCOMPILER) $(LIBRATION)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(INST)/ration.pc: runtime/ration.pc.in $(INST)/prefix
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $< >$@

install: $(INST)/ration $(LIBRATION) $(LIBSO) $(INST)/ration.pc $(if $(NVCC),$(LIBCUDA))
	install -d $(DEST)/bin $(DEST)/lib/pkgconfig $(DEST)/include/ration $(DEST)/share/ration/budgets \
	  $(DEST)/share/man/man1
	install -m 755 $(INST)/ration $(DEST)/bin/ration
	install -m 644 $(LIBRATION) $(if $(NVCC),$(LIBCUDA)) $(DEST)/lib/
	install -m 755 $(LIBSO) $(DEST)/lib/
	ln -sf $(notdir $(LIBSO)) $(DEST)/lib/$(SONAME)
	ln -sf $(SONAME) $(DEST)/lib/libration.so
	install -m 644 $(INST)/ration.pc $(DEST)/lib/pkgconfig/ration.pc
	install -m 644 $(HEADERS:%=runtime/%) $(DEST)/include/ration/
	install -m 644 $(PROFILES:%=budgets/%) $(DEST)/share/ration/budgets/
	install -m 644 $(MAN_PAGES:%=docs/man/%) $(DEST)/share/man/man1/

uninstall:
	rm -f $(INST_FILES:%=$(DEST)/%)
	rmdir $(DEST)/include/ration $(DEST)/share/ration/budgets $(DEST)/share/ration 2>/dev/null || true
