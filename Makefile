# fsdpc: `make` builds ./fsdpc; `make run` trains the default model; `make test`; `make bench`.
CC = mpicc
HDF5_DIR = /usr/lib/x86_64-linux-gnu/hdf5/openmpi
BLAS_DIR = /usr/lib/x86_64-linux-gnu/openblas-openmp
# x86-64-v3 (AVX2/FMA) rather than -march=native: the binary also runs on the GPU machine's host
ARCH ?= -march=x86-64-v3
CFLAGS ?= -O3 $(ARCH) -Wall -Wextra -Wno-unused-parameter
CFLAGS += -std=gnu11 -fno-math-errno -fopenmp -I/usr/include/hdf5/openmpi -I/usr/include/x86_64-linux-gnu/openblas-openmp -MMD -MP
LDLIBS = -L$(HDF5_DIR) -lhdf5 -lz -lpthread -L$(BLAS_DIR) -lopenblas -Wl,-rpath,$(BLAS_DIR) -lm

SRC = $(wildcard comm/*.c model/*.c shard/*.c data/*.c ckpt/*.c kernels/*.c kernels/cpu/*.c)
OBJ = $(SRC:%.c=build/%.o)
TESTS = build/test_kernels build/test_model build/test_comm

.PHONY: all run test bench deps clean
all: fsdpc

deps:
	@bash run/install-deps.sh

build/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

fsdpc: build/main.o $(OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

build/test_%: test/test_%.c $(OBJ)
	$(CC) $(CFLAGS) -I. $^ -o $@ $(LDLIBS)

run: deps
	@$(MAKE) --no-print-directory fsdpc
	./fsdpc

test: deps
	@$(MAKE) --no-print-directory fsdpc $(TESTS)
	bash test/run_tests.sh

bench: deps
	@$(MAKE) --no-print-directory fsdpc
	bash bench/bench.sh

clean:
	rm -rf build fsdpc

-include $(OBJ:.o=.d) build/main.d
