// Fuzz target: the command-line parser. The input is argv, one argument per NUL- or newline-
// separated piece; a rejected command line must end in comm_fail_all, never a crash. One that asks
// for --help prints it (to /dev/null): the help formatter reads every flag's default and choices.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../run/flags.h"
#include "stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { MAXARG = 64 };
    char *buf = malloc(size + 1), *argv[MAXARG + 1] = {"fsdpc"};
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 1;
    for (char *p = buf, *end = buf + size; p <= end && argc < MAXARG; argc++) {
        argv[argc] = p;
        while (p < end && *p && *p != '\n') p++;
        *p++ = 0;
    }
    static Config cfg;
    static FILE *null;
    if (!null) null = fopen("/dev/null", "w");
    volatile int rc = CLI_OK;  // set between setjmp and a longjmp
    FUZZ_TRY(rc = flags_parse(&cfg, argc, argv));
    if (rc == CLI_HELP && null) cli_help(&flags_cli, null);
    cli_free(&flags_cli, &cfg);  // the paths are heap strings
    free(buf);
    return 0;
}
