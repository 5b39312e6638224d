// cli: the one table-driven command-line parser, for fsdpc's own flags (run/flags.c) and every
// subcommand's (run/commands.c lists them). A table lists the flags with where each value lives in
// the caller's struct, its spellings, and what --help says of it; enumerated settings list their
// names once, in a CliChoice table that parsing, --help, error messages and the name of a value
// (logs, checkpoints) all read.
#ifndef FSDPC_CLI_H
#define FSDPC_CLI_H

#include <stddef.h>
#include <stdio.h>

// One spelling of an enumerated setting. A table ends with {NULL, 0}; a value's first entry is
// its name, later ones with the same value are other spellings that parsing also accepts.
typedef struct {
    const char *name;
    int value;
} CliChoice;

// The items of a CLI_LIST flag: pointers into argv.
typedef struct {
    const char **v;
    int n;
} CliList;

// CLI_ENUM stores the value of one of `choices`; CLI_MAP translates other spellings (`choices`)
// into a setting whose names are `names`; CLI_BOOLENUM maps a boolean onto choices[0] (true) or
// choices[1] (false). Those three store an int, or for a string field (size > 0) the value's
// name. CLI_UNSUP names a feature fsdpc lacks (text says why): its "off" values are accepted,
// anything else is refused. CLI_LIST takes every argument up to the next flag. CLI_CALL hands the
// value to `call` (its `choices`, when set, are the values --help lists). CLI_PATH stores a heap
// copy of the whole value in a `char *` field (a path is never cut: the operating system's
// limits are checked where the path is used); cli_parse sets every unset one to "", and
// cli_free releases them.
typedef enum {
    CLI_INT, CLI_U64, CLI_FLOAT, CLI_DOUBLE, CLI_STR, CLI_BOOL, CLI_ENUM, CLI_MAP, CLI_BOOLENUM, CLI_UNSUP, CLI_LIST,
    CLI_CALL, CLI_PATH
} CliKind;

// other spellings of a flag, in a CliFlag initializer: CLI_ALIASES("seq_len", "seq_length")
#define CLI_ALIASES(...) .aliases = (const char *const[]){__VA_ARGS__, NULL}

typedef struct {
    const char *name;
    const char *const *aliases;  // other spellings of the same flag, NULL-terminated; or NULL
    CliKind kind;
    size_t off, size;   // where the value lives in the destination struct; size of a string field
    const CliChoice *choices;
    const CliChoice *names;  // CLI_MAP: the setting's own names
    // CLI_UNSUP: why; CLI_LIST: what one item is ("file"); a number: what a value must be, for the
    // error when it does not parse or `valid` refuses it (NULL: "an integer", "a number")
    const char *text;
    int (*valid)(const void *value);  // a number's range, checked on the stored value; NULL: any
    // a number's sane range, "[lo, hi]" with ( or ) for an open end (hi may be inf): a value
    // outside it is refused, naming it; NULL: any value of the type
    const char *range;
    // CLI_CALL: sets the value into dst; NULL, or why it cannot (a one-line message)
    const char *(*call)(void *dst, const char *value);
    // CLI_CALL: the default --help shows, written from dst; NULL shows the string at `off` when
    // `size` is set, else none
    void (*show)(const void *dst, char *buf, size_t len);
    int first;  // applied before every other flag, which may then override what it set (a preset)
    const char *group;  // the heading --help lists it under; NULL: the table's flags
    const char *help;   // one line for --help
    const char *arg;    // the value's name in --help ("PATH"); NULL: from the kind ("N", "X")
    // --help's default where the value is unset (0, "", or an enum value without a name): what
    // the command does then ("the tokenizer's")
    const char *unset;
} CliFlag;

enum { CLI_MAX_FLAGS = 512 };  // entries a table and its base may have together
typedef struct CliTable {
    const CliFlag *flags;
    size_t n;
    // where dst keeps n bytes, filled: which flags the command line set (never at offset 0, so
    // that 0 says nowhere); a base table's lie base_off further
    size_t given_off;
    const char *command;       // the subcommand in messages ("prepare"), or NULL (training)
    const char *bare_hint;     // follows an argument that is neither a flag nor a list item
    int strict;                // a value may be neither empty nor begin with "--"
    size_t size;               // bytes of the destination struct (--help fills one with defaults)
    void (*defaults)(void *dst);  // sets dst's defaults before the command line is read; or NULL
    // a second table whose flags this one also takes, their values at dst + base_off (plan reads
    // the training flags); it has no base of its own
    const struct CliTable *base;
    size_t base_off;
} CliTable;

enum { CLI_ERROR = -1, CLI_OK, CLI_HELP };
// Fills dst with the defaults (the base's, then t's own), then reads argv[1..argc-1] into it.
// CLI_HELP: --help or -h came first of anything wrong, and the rest was not read. CLI_ERROR: a
// bad flag or value, its one line in err (the same on every rank: all ranks parse the same argv).
// A CLI_LIST's items array is malloc'ed; the caller frees it. The CLI_PATH strings are too: cli_free.
int cli_parse(const CliTable *t, void *dst, int argc, char **argv, char *err, size_t errlen);
// Frees the CLI_PATH values of t and its base in dst, leaving them NULL.
void cli_free(const CliTable *t, void *dst);
// Whether the cli_parse of t that filled dst set flag `name` (or an alias); a flag sharing a
// setting with another counts as given when either spelling was.
int cli_given(const CliTable *t, const void *dst, const char *name);
// Makes flag `name` count as not given (a recipe whose script ignores it for this model); its
// value is the caller's to reset.
void cli_forget(const CliTable *t, void *dst, const char *name);
// Whether the last cli_parse of any table read flag `spelling` under exactly that spelling (an
// alias counts only as itself): which dialect a command line is written in.
int cli_spelled(const char *spelling);
// Sets flag `name` of t (its canonical name) to value, as a default: the command line's own value
// wins, so a flag the parse of dst set is left alone, and one set here does not count as given.
// The value is checked as a command-line value is: 0, or -1 with the line in err.
int cli_set_default(const CliTable *t, void *dst, const char *name, const char *value, char *err, size_t errlen);
// The name of value in choices (its first entry), or "?" when it has none.
const char *cli_choice_name(const CliChoice *choices, int value);
// Writes t's flags (then its base's) by group: each with its aliases, value, choices, default
// (from t->defaults) and help line, within 100 columns.
void cli_help(const CliTable *t, FILE *out);
// Writes one line per flag of t and its base: `prefix --name --alias ...` (for tests and shell
// completion).
void cli_list(const CliTable *t, const char *prefix, FILE *out);
// The entry of names[0..n-1] nearest to word by edit distance, or NULL when none is near enough
// to be a likely typo.
const char *cli_nearest(const char *word, const char *const *names, size_t n);

#endif
