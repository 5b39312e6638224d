// cmd_tokenize: `fsdpc tokenize`, its flags, and the run over standard input on rank 0.
#include "cmd_tokenize.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../base/err.h"
#include "../base/log.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "../comm/io.h"
#include "../data/rows/sft.h"
#include "../data/text/chat.h"
#include "../data/text/tokenizer.h"

typedef struct {
    char *tokenizer;  // heap, any length (CLI_PATH)
    int bos, eos, decode, chat, labels;
    int tmpl;  // ChatTemplate
    unsigned char given[CLI_MAX_FLAGS];  // which of tokenize_cli's flags the command line set
} TokenizeArgs;

static const char *tokenize_template(void *dst, const char *v) {
    static char msg[300];
    ChatTemplate t;
    if (!sft_template_parse(v, &t)) return ((TokenizeArgs *)dst)->tmpl = (int)t, NULL;
    return err_text(msg, sizeof msg, "--chat_template '%.200s' is none of " CHAT_TEMPLATE_LIST, v);
}

static void tokenize_show_template(const void *dst, char *buf, size_t len) {
    snprintf(buf, len, "%s", sft_template_name((ChatTemplate)((const TokenizeArgs *)dst)->tmpl));
}

static void tokenize_defaults(void *dst) { ((TokenizeArgs *)dst)->tmpl = CHAT_LLAMA2; }

#define TOK_AT(field) .off = offsetof(TokenizeArgs, field)
static const CliFlag tokenize_flags[] = {
    {.name = "tokenizer", .kind = CLI_PATH, TOK_AT(tokenizer), .arg = "SPEC",
     .help = TOK_SPECS " (required)"},
    {.name = "bos", .kind = CLI_BOOL, TOK_AT(bos), .help = "begin each line's ids with BOS"},
    {.name = "eos", .kind = CLI_BOOL, TOK_AT(eos), .help = "end each line's ids with EOS"},
    {.name = "decode", .kind = CLI_BOOL, TOK_AT(decode), .help = "read lines of ids, write their text"},
    {.name = "chat", .kind = CLI_BOOL, TOK_AT(chat),
     .help = "read chat JSON Lines ({\"messages\": [...]} or {\"conversations\": [...]}), one line of ids per conversation"},
    {.name = "chat_template", .kind = CLI_CALL, TOK_AT(tmpl), .call = tokenize_template, .show = tokenize_show_template,
     .arg = CHAT_TEMPLATE_CHOICES, .help = "--chat's template"},
    {.name = "labels", .kind = CLI_BOOL, TOK_AT(labels), .help = "--chat: each line's labels on the next line, -1 where no loss"},
};
const CliTable tokenize_cli = {.flags = tokenize_flags, .n = sizeof tokenize_flags / sizeof tokenize_flags[0],
                               .given_off = offsetof(TokenizeArgs, given), .command = "tokenize", .bare_hint = "tokenize reads standard input",
                               .size = sizeof(TokenizeArgs), .defaults = tokenize_defaults};

int cmd_tokenize(void *args) {
    const TokenizeArgs *a = args;
    const char *spec = a->tokenizer;
    bool bos = a->bos, eos = a->eos, decode = a->decode, chat = a->chat, labels = a->labels;
    bool tmpl_given = cli_given(&tokenize_cli, a, "chat_template");
    if (!*spec) comm_fail_all("tokenize needs --tokenizer (" TOK_SPECS ")");
    comm_check_all(path_too_long("--tokenizer", spec));
    if (decode && (bos || eos)) comm_fail_all("--bos and --eos apply to encoding, not to --decode");
    if (chat && (bos || eos || decode)) comm_fail_all("--chat adds BOS and EOS as its template says; --bos, --eos and --decode do not apply");
    if (!chat && (labels || tmpl_given)) comm_fail_all("%s applies to --chat only", labels ? "--labels" : "--chat_template");
    ChatTemplate tmpl = (ChatTemplate)a->tmpl;
    char err[1024];
    Tokenizer *t = tok_open(spec, err, sizeof err);
    if (!t) comm_fail_all("%s", err);
    // ids or text go to stdout: a file there must not be the tokenizer being read
    if (strcmp(tok_path(t), "byte")) io_input(tok_path(t), "--tokenizer");
    comm_check_all(comm_info.rank == 0 ? io_output("/dev/stdout", "standard output") : NULL);
    comm_check_all(comm_info.rank == 0 ? io_stdout_open() : NULL);
    // stdin reaches rank 0 only; the others wait to share its outcome, for as long as the stream
    // lasts (a pipe from a long job, a terminal): no collective timeout while it is read
    comm_set_collective_timeout(0);
    char why[1024];
    const char *fail = NULL;
    unsigned long lines = 0;
    comm_stop_polled(1);  // between lines; a blocked read of stdin ends with EINTR
    if (comm_info.rank == 0 && chat) {
        static char obuf[1 << 16];
        setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
        fail = sft_tokenize_chat(t, tmpl, labels, stdin, stdout, &comm_stop_signal, &lines, why, sizeof why);
        const char *w = io_write_error(stdout, "standard output");  // the reason, where a write failed
        if (w) fail = w;
    } else if (comm_info.rank == 0) {
        static char obuf[1 << 16];
        setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
        fail = tok_lines(t, bos, eos, decode, stdin, stdout, &comm_stop_signal, &lines, why, sizeof why);
        if (!fail) fail = io_write_error(stdout, "standard output");
    }
    int stopped = comm_info.rank == 0 ? comm_stop_signal : 0;  // rank 0's reading is the job's
    comm_check_all(stopped ? NULL : fail);
    comm_bcast_bytes(comm_world(), &stopped, sizeof stopped, 0);
    if (stopped)
        log_msg("Stopped by signal %d (%s) during tokenize: standard output holds the whole lines of the first %lu input "
                "line(s); exiting with status %d\n", stopped, comm_signal_name(stopped), lines, COMM_EXIT_STOPPED);
    tok_free(t);
    return stopped ? COMM_EXIT_STOPPED : 0;
}
