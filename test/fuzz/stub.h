// stub: comm/ for fuzz targets (see stub.c). FUZZ_TRY(stmt) runs stmt; a would-be job exit returns here.
#ifndef FSDPC_FUZZ_STUB_H
#define FSDPC_FUZZ_STUB_H

#include <setjmp.h>

#include "../../comm/comm.h"

extern jmp_buf fuzz_env;
extern int fuzz_armed;
#define FUZZ_TRY(stmt)                 \
    do {                               \
        fuzz_armed = 1;                \
        if (!setjmp(fuzz_env)) { stmt; } \
        fuzz_armed = 0;                \
    } while (0)

#endif
