// test_gpu_emu: test_gpu on the CPU emulation in test/gpu/emu/include, with the comm functions it
// calls stubbed out (no MPI; base/ gives errors and allocation); test_gpu.c is built with main renamed.
#include <cstdio>
extern "C" {
#include "comm/comm.h"
CommInfo comm_info;
void comm_init(int *, char ***) {}
void comm_finalize(void) {}
int test_main(int argc, char **argv);
}
int main(int argc, char **argv) { setvbuf(stdout, NULL, _IOLBF, 0); return test_main(argc, argv); }
