# fsdpc: `make` builds ./fsdpc (Open MPI); `make MPI=mpich` builds ./fsdpc-mpich; `make run` trains the default model; `make test`; `make bench`.
# The CUDA backend (kernels/cuda, NCCL transport) is built in when nvcc is found; CUDA=0 turns it off.
# MPI=mpich: Debian's MPICH (libmpich-dev, libhdf5-mpich-dev) into its own object folder and
# ./fsdpc-mpich; ./fsdpc stays Open MPI. Open MPI's compiler is named by its own name where
# Debian has it: installing MPICH must not be able to turn plain `mpicc` into MPICH's.
MPI = openmpi
# plain `make` is `make all` (./fsdpc), whatever rule a conditional section defines first
.DEFAULT_GOAL := all
ifeq ($(MPI),mpich)
CC = mpicc.mpich
HDF5_DIR = /usr/lib/x86_64-linux-gnu/hdf5/mpich
PROG = fsdpc-mpich
# the test binaries and tools share names across flavours and are launched with Open MPI's mpirun
ifneq ($(filter-out all fsdpc-mpich deps clean,$(or $(MAKECMDGOALS),all)),)
$(error MPI=mpich builds ./fsdpc-mpich only (make MPI=mpich); `make test` builds and runs it in test/integration/test_mpich.sh)
endif
else ifeq ($(MPI),openmpi)
CC = $(if $(shell command -v mpicc.openmpi 2>/dev/null),mpicc.openmpi,mpicc)
HDF5_DIR = /usr/lib/x86_64-linux-gnu/hdf5/openmpi
PROG = fsdpc
else
$(error MPI=$(MPI): fsdpc builds against openmpi (the default) or mpich)
endif
BLAS_DIR = /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC = /usr/include/x86_64-linux-gnu/openblas-openmp
CUDA_HOME ?= /usr/local/cuda
NPROC ?= $(shell nproc)
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA ?= $(if $(filter thread,$(SAN)),0,$(if $(and $(NVCC),$(wildcard kernels/cuda/*.cu)),1,0))
# x86-64-v3 (AVX2/FMA) rather than -march=native: the binary also runs on the GPU machine's host
ARCH ?= -march=x86-64-v3
CFLAGS ?= -O3 $(ARCH) -Wall -Wextra -Wno-unused-parameter
CFLAGS += -std=gnu11 -Werror=implicit-function-declaration -fno-math-errno -fopenmp -I$(HDF5_DIR)/include -I$(BLAS_INC) -MMD -MP
CXX = g++
CXXFLAGS ?= -O2 $(ARCH) -Wall -Wextra
CXXFLAGS += -std=c++17 -MMD -MP
LDLIBS = -Wl,--build-id=sha1 -L$(HDF5_DIR)/lib -lhdf5 -lz -lpthread -L$(BLAS_DIR) -lopenblas -Wl,-rpath,$(BLAS_DIR) -lsentencepiece -lstdc++ -lpcre2-8 -lutf8proc -lsnappy -lzstd -llz4 -lm
HOST_LDLIBS := $(LDLIBS)
# C++ only where a library has no C API (libsentencepiece): thin wrappers with C linkage
CXX_SRC = $(wildcard data/*/*.cpp)

SRC = $(wildcard base/*.c comm/*.c model/*.c shard/*.c run/*.c data/*/*.c ckpt/*.c kernels/*.c kernels/cpu/*.c)
ifeq ($(CUDA),1)
BUILD = build/cuda
CFLAGS += -DFSDPC_CUDA -I$(CUDA_HOME)/include
NVCCFLAGS = -std=c++17 -O3 -DFSDPC_CUDA -I. -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-Xcompiler -Wall,-Wextra -MMD -MP
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
# the CUDA objects hold no MPI: every MPI flavour links the same ones (CU_BUILD, below)
CU_OBJ = $(patsubst %.cu,$(CU_BUILD)/%.o,$(wildcard kernels/cuda/*.cu))
else
BUILD = build/cpu
SRC := $(filter-out comm/nccl.c,$(SRC))
CU_OBJ =
endif
# make test SAN=1: ASan + UBSan build (own object folder); MPI's own allocations are not leak-checked
ifeq ($(SAN),1)
BUILD := $(BUILD)-san
CFLAGS += -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
CXXFLAGS += -g -fsanitize=address,undefined
SAN_LD = -fsanitize=address,undefined
LDLIBS += $(SAN_LD)
HOST_LDLIBS += $(SAN_LD)
export ASAN_OPTIONS ?= detect_leaks=0
endif
# make fsdpc SAN=thread: ThreadSanitizer's fsdpc, CPU only, as build/fsdpc-tsan (own object folder;
# ./fsdpc stays as it is): test/integration/test_ckpt_async.sh runs the background checkpoint writer on it
ifeq ($(SAN),thread)
BUILD = build/cpu-tsan
PROG = build/fsdpc-tsan
CFLAGS += -g -O1 -fno-omit-frame-pointer -fsanitize=thread
CXXFLAGS += -g -fsanitize=thread
LDLIBS += -fsanitize=thread
fsdpc: $(PROG)
endif
ifneq ($(SAN),thread)
# make test builds it too (TESTS): its own make, into its own folders
build/fsdpc-tsan: $(SRC) $(CXX_SRC) $(wildcard */*.h */*/*.h) main.c
	@$(MAKE) --no-print-directory SAN=thread build/fsdpc-tsan
endif
CU_BUILD := $(BUILD)
ifeq ($(MPI),mpich)
BUILD := $(BUILD)-mpich
endif
# build/flavor changes when the object folder does, so ./fsdpc relinks after a SAN=1 build (and
# build/flavor-mpich for ./fsdpc-mpich)
FLAVOR = build/flavor$(if $(filter mpich,$(MPI)),-mpich)$(if $(filter thread,$(SAN)),-tsan)
$(shell mkdir -p build; [ "$$(cat $(FLAVOR) 2>/dev/null)" = "$(BUILD)" ] || echo "$(BUILD)" >$(FLAVOR))
# The CPU kernels again for AVX-512 (kernels/cpu/cpu_common.h), chosen at run time from the CPU's
# features: the binary stays x86-64-v3. 512-bit vectors: GCC's x86-64-v4 default prefers 256.
CPU_SIMD = attention elementwise matmul moe norm
AVX512_FLAGS = -march=x86-64-v4 -mprefer-vector-width=512 -DCPU_AVX512
AVX512_OBJ = $(CPU_SIMD:%=$(BUILD)/kernels/cpu/avx512/%.o)
OBJ = $(SRC:%.c=$(BUILD)/%.o) $(AVX512_OBJ) $(CXX_SRC:%.cpp=$(BUILD)/%.o) $(CU_OBJ)
# build/test_gpu, in a CUDA build: test/gpu/test_bundle.sh packs it as run/gpu-bundle.sh would
TESTS = build/test_kernels build/test_model build/test_comm build/test_arrow build/test_sources build/test_parquet build/test_sft build/test_gpu_emu build/fsdpc_emu \
	build/emu_race_check build/fsdpc-tsan $(FUZZ_TARGETS) $(if $(filter 1,$(CUDA)),build/test_gpu)

.PHONY: all run test check check-layers test-slurm test-gpu bench bench-gpu gpu-check deps clean fuzz
all: $(PROG)

# without the toolchain (a fresh machine), say what installs it rather than fail with Error 127;
# run, test, check, bench and fuzz install it themselves (deps) before building
ifeq ($(shell command -v $(CC) 2>/dev/null),)
ifneq ($(filter-out deps clean run test check bench fuzz,$(or $(MAKECMDGOALS),all)),)
$(error $(CC) not found: run `make deps` first (it installs the Debian packages fsdpc builds with), or `make run`, which does)
endif
endif

deps:
	@bash run/install-deps.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels/cpu/avx512/%.o: kernels/cpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(CU_BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(PROG): $(BUILD)/main.o $(OBJ) $(FLAVOR)
	$(CC) $(CFLAGS) $(filter-out $(FLAVOR),$^) -o $@ $(LDLIBS)

build/test_%: test/unit/test_%.c $(OBJ) $(FLAVOR)
	$(CC) $(CFLAGS) -I. $(filter-out $(FLAVOR),$^) -o $@ $(LDLIBS)

build/test_gpu: test/gpu/test_gpu.c $(OBJ) $(FLAVOR)
	$(CC) $(CFLAGS) -I. $(filter-out $(FLAVOR),$^) -o $@ $(LDLIBS)

# The GPU code on the CPU (needs no nvcc): the CUDA sources, with kernel launches rewritten, against
# test/gpu/emu's fakes of the CUDA runtime, cuBLASLt, WMMA, CUB and NCCL (one CPU thread per GPU thread,
# device memory inaccessible to host code). build/test_gpu_emu is test_gpu on it; build/fsdpc_emu
# is the whole program with the emulated GPU as its CUDA device.
# the emulator's C objects take CFLAGS, sanitizers included: a folder per flavour keeps them apart.
# -O2: the emulated kernel suite runs 2.2x faster than at -O1, for ~10 s more build
EMU = build/emu$(if $(filter 1,$(SAN)),-san)
EMU_OBJ = $(patsubst kernels/cuda/%.cu,$(EMU)/%.o,$(wildcard kernels/cuda/*.cu))
EMU_HDR = $(patsubst kernels/cuda/%,$(EMU)/%,$(wildcard kernels/cuda/*.cuh))
EMU_REWRITE = perl -pe 's/(\w+)<<<(.*?)>>>\(/emu_launch($$1, $$2)(/g; s/extern __shared__ (__align__\(\d+\) )?float smem\[\];/float *smem = emu::dyn_smem;/; s/__shared__ (\w+) (\w+)\[(\w+)\];/$$1 (&$$2)[$$3] = emu::shared_array<$$1, $$3, __LINE__>();/'
EMU_CXX = g++ -std=c++20 -O2 -pthread -DFSDPC_CUDA -Itest/gpu/emu/include -Ikernels/cuda -I. -idirafter $(CUDA_HOME)/include -Wall -Wno-unused-parameter -Wno-unknown-pragmas -MMD -MP
CPU_KERN_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard kernels/cpu/*.c)) $(AVX512_OBJ)

.PRECIOUS: $(EMU)/%.cpp
$(EMU)/%.cpp: kernels/cuda/%.cu Makefile
	@mkdir -p $(EMU)
	$(EMU_REWRITE) $< > $@

# a static pattern: the headers are then targets make knows, so a fresh tree's first emu build
# does not fall back to the built-in %.o: %.cpp rule while they do not exist yet
$(EMU_HDR): $(EMU)/%.cuh: kernels/cuda/%.cuh Makefile
	@mkdir -p $(EMU)
	$(EMU_REWRITE) $< > $@

$(EMU)/%.o: $(EMU)/%.cpp $(EMU_HDR)
	$(EMU_CXX) -c $< -o $@

$(EMU)/emu_main.o: test/gpu/emu/emu_main.cpp
	@mkdir -p $(EMU)
	$(EMU_CXX) -c $< -o $@

$(EMU)/device.o: test/gpu/emu/device.cpp test/gpu/emu/emu_device.h
	@mkdir -p $(EMU)
	$(EMU_CXX) -c $< -o $@

$(EMU)/cudnn.o: test/gpu/emu/cudnn.cpp test/gpu/emu/emu_device.h
	@mkdir -p $(EMU)
	$(EMU_CXX) -c $< -o $@

$(EMU)/test_gpu.o: test/gpu/test_gpu.c
	@mkdir -p $(EMU)
	gcc $(CFLAGS) -DFSDPC_CUDA -Dmain=test_main -I. -c $< -o $@

# the kernels' ground floor (errors, allocation, logging, limits) is base/, which needs no MPI
BASE_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard base/*.c))
build/test_gpu_emu: $(EMU_OBJ) $(EMU)/emu_main.o $(EMU)/device.o $(EMU)/cudnn.o $(EMU)/test_gpu.o $(CPU_KERN_OBJ) $(BUILD)/kernels/dispatch.o $(BASE_OBJ)
	g++ -fopenmp -pthread $^ -o $@ -L$(BLAS_DIR) -lopenblas -Wl,-rpath,$(BLAS_DIR) -ldl -lm $(SAN_LD)

EMU_C_OBJ = $(patsubst %.c,$(EMU)/c/%.o,main.c $(wildcard base/*.c comm/*.c model/*.c shard/*.c run/*.c data/*/*.c ckpt/*.c kernels/*.c kernels/cpu/*.c) test/gpu/emu/c/capi.c) \
	$(CPU_SIMD:%=$(EMU)/c/kernels/cpu/avx512/%.o)
$(EMU)/c/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) -Itest/gpu/emu/c $(CFLAGS) -DFSDPC_CUDA -c $< -o $@

$(EMU)/c/kernels/cpu/avx512/%.o: kernels/cpu/%.c
	@mkdir -p $(dir $@)
	$(CC) -Itest/gpu/emu/c $(CFLAGS) -DFSDPC_CUDA $(AVX512_FLAGS) -c $< -o $@

build/fsdpc_emu: $(EMU_C_OBJ) $(CXX_SRC:%.cpp=$(BUILD)/%.o) $(EMU_OBJ) $(EMU)/device.o $(EMU)/cudnn.o
	$(CC) $(CFLAGS) $^ -o $@ $(HOST_LDLIBS) -lstdc++

build/emu_race_check: test/gpu/emu/race_check.cpp $(EMU)/device.o
	$(EMU_CXX) $^ -o $@

# libFuzzer targets (clang): the parsers of hostile input, built with ASan and UBSan against
# test/fuzz/stub.c. `make fuzz FUZZ_SECONDS=N` fuzzes each for N seconds; `make test` replays
# the regression corpus in test/fuzz/corpus.
FUZZ_CC = clang
# the family files as descriptors only (model/family.h), so config and checkpoint parsers link without kernels/
FUZZ_FLAGS = -g -O1 -std=gnu11 -Werror=implicit-function-declaration -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -DFAMILY_DESCRIPTION_ONLY \
	-I/usr/include/hdf5/openmpi -I/usr/include/x86_64-linux-gnu/openmpi
FUZZ_TARGETS = build/fuzz/fuzz_cli build/fuzz/fuzz_json build/fuzz/fuzz_shard_header build/fuzz/fuzz_jsonl build/fuzz/fuzz_tokenizer \
	build/fuzz/fuzz_ckpt_validate build/fuzz/fuzz_arrow build/fuzz/fuzz_sniff build/fuzz/fuzz_parquet build/fuzz/fuzz_sft build/fuzz/fuzz_ident
FUZZ_SECONDS ?= 60
FAMILY_SRC = model/family.c model/llama.c model/gpt.c model/neox.c
build/fuzz/fuzz_json: test/fuzz/fuzz_json.c base/json.c base/buf.c base/path.c test/fuzz/stub.c
build/fuzz/fuzz_shard_header: test/fuzz/fuzz_shard_header.c data/format/shardfile.c base/path.c test/fuzz/stub.c
build/fuzz/fuzz_arrow: test/fuzz/fuzz_arrow.c data/format/arrow.c base/buf.c base/path.c test/fuzz/stub.c
build/fuzz/fuzz_ckpt_validate: test/fuzz/fuzz_ckpt_validate.c ckpt/validate.c model/config.c base/cli.c base/path.c $(FAMILY_SRC) base/checked.c kernels/cpu/nf4.c test/fuzz/stub.c
build/fuzz/fuzz_sniff: test/fuzz/fuzz_sniff.c data/format/sniff.c base/path.c base/json.c base/buf.c test/fuzz/stub.c
build/fuzz/fuzz_parquet: test/fuzz/fuzz_parquet.c data/format/parquet.c base/buf.c base/path.c test/fuzz/stub.c
# the tokenizers with the finetuning rows they build (data/rows/sft reads rows through data/rows/docs)
TOKENIZER_SRC = comm/io.c base/wlock.c base/clock.c base/path.c base/buf.c base/cli.c data/text/tokenizer.c data/text/chat.c data/text/bpe.c data/source/hub.c base/json.c data/rows/sft.c data/rows/docs.c data/format/gz.c data/format/arrow.c data/format/parquet.c build/fuzz/sentencepiece.o
# the flag table names the finetuning formats, which data/text and data/rows define
build/fuzz/fuzz_cli: test/fuzz/fuzz_cli.c run/flags.c run/recipes.c shard/shard_config.c model/config.c $(FAMILY_SRC) base/checked.c \
	$(TOKENIZER_SRC) test/fuzz/stub.c
build/fuzz/fuzz_jsonl: test/fuzz/fuzz_jsonl.c data/build/prepare.c data/build/shards.c data/format/shardfile.c data/rows/rows.c data/format/sniff.c data/source/source.c data/format/arrow.c data/format/parquet.c $(TOKENIZER_SRC) test/fuzz/stub.c
build/fuzz/fuzz_tokenizer: test/fuzz/fuzz_tokenizer.c $(TOKENIZER_SRC) test/fuzz/stub.c
build/fuzz/fuzz_sft: test/fuzz/fuzz_sft.c $(TOKENIZER_SRC) test/fuzz/stub.c
# ident.c names files as UTF-8 with base/json's character check
build/fuzz/fuzz_ident: test/fuzz/fuzz_ident.c data/source/ident.c $(TOKENIZER_SRC) test/fuzz/stub.c
build/fuzz/sentencepiece.o: data/text/sentencepiece.cpp
	@mkdir -p build/fuzz
	clang++ -g -O1 -std=c++17 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -c $< -o $@
# each source compiled once for all the targets that list it (build/fuzz/obj/), the fuzzer's
# main linked in only at the end
.SECONDEXPANSION:
$(FUZZ_TARGETS): $$(patsubst %.c,build/fuzz/obj/%.o,$$(filter %.c,$$^))
build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst -fsanitize=fuzzer$(comma),-fsanitize=fuzzer-no-link$(comma),$(FUZZ_FLAGS)) -MMD -MP -c $< -o $@
build/fuzz/%:
	$(FUZZ_CC) $(FUZZ_FLAGS) $(filter %.o,$^) -o $@ -lm -lpthread -lz -lsnappy -lzstd -llz4 $(if $(filter build/fuzz/sentencepiece.o,$^),-lsentencepiece -lstdc++ -lpcre2-8 -lutf8proc)


fuzz: deps
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS)
	bash test/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# each `make run` trains the default afresh, replacing the previous one's checkpoints
run: deps
	@$(MAKE) --no-print-directory fsdpc
	./fsdpc --overwrite_checkpoints

# the build on every core (CI calls plain `make test`): a serial one is minutes of the budget
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) fsdpc $(TESTS)
	bash test/run_tests.sh

# the everyday loop (under 3 minutes on 2 cores): unit tests, gradient checks, one multi-rank
# equivalence, the layer check and the command-line table; `make test` is the whole suite
check: deps
	@$(MAKE) --no-print-directory -j$(NPROC) fsdpc build/test_kernels build/test_model build/test_comm
	bash test/run_tests.sh --quick

# includes and calls only go down the layers (docs/DESIGN.md, "Layers")
check-layers: fsdpc
	/usr/bin/python3 test/meta/check_layers.py --objects $(BUILD) .

# a real single-node Slurm (slurmctld, slurmd, munge from Debian) for the launch recipes;
# make test runs it too, and it skips with a reason where the daemons cannot start
test-slurm: fsdpc
	bash test/integration/test_slurm.sh

bench: deps
	@$(MAKE) --no-print-directory fsdpc build/test_kernels
	bash bench/bench.sh

# GPU machine: the CUDA build's binary and build/test_gpu (see docs/gpu.md)
test-gpu: fsdpc build/test_gpu
	bash test/gpu/run_gpu_tests.sh

bench-gpu: fsdpc
	bash bench/bench_gpu.sh

# the first GPU machine, after run/gpu-bundle.sh's install line (. .gpu/install.sh): builds
# nothing (the machine has no Open MPI or HDF5 headers), checks the binaries it placed, ends with
# a table; gpu-check.txt, .json and the logs go to GPU_CHECK_OUT_DIR ($OUT, else gpu-check/)
gpu-check:
	bash run/gpu_check.sh

clean:
	rm -rf build fsdpc fsdpc-mpich

comma := ,
-include $(shell find build/fuzz/obj -name '*.d' 2>/dev/null)
-include $(OBJ:.o=.d) $(BUILD)/main.d $(EMU_OBJ:.o=.d) $(EMU)/emu_main.d $(EMU)/test_gpu.d $(EMU_C_OBJ:.o=.d)
