// cli: the one table-driven command-line parser, for fsdpc's own flags (model/config.c) and each
// subcommand's (data/prepare.c). A table lists the flags with where each value lives in the
// caller's struct; enumerated settings list their names once, in a CliChoice table that parsing,
// error messages and the name of a value (logs, checkpoints) all read.
#ifndef FSDPC_CLI_H
#define FSDPC_CLI_H

#include <stddef.h>

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
// value to `call`.
typedef enum {
    CLI_INT, CLI_U64, CLI_FLOAT, CLI_DOUBLE, CLI_STR, CLI_BOOL, CLI_ENUM, CLI_MAP, CLI_BOOLENUM, CLI_UNSUP, CLI_LIST,
    CLI_CALL
} CliKind;

typedef struct {
    const char *name;
    const char *alias;  // another spelling of the flag, or NULL
    CliKind kind;
    size_t off, size;   // where the value lives in the destination struct; size of a string field
    const CliChoice *choices;
    const CliChoice *names;  // CLI_MAP: the setting's own names
    // CLI_UNSUP: why; CLI_LIST: what one item is ("file"); a number: what a value must be, for the
    // error when it does not parse or `valid` refuses it (NULL: "an integer", "a number")
    const char *text;
    int (*valid)(const void *value);  // a number's range, checked on the stored value; NULL: any
    // CLI_CALL: sets the value into dst; NULL, or why it cannot (a one-line message)
    const char *(*call)(void *dst, const char *value);
    int first;  // applied before every other flag, which may then override what it set (a preset)
} CliFlag;

enum { CLI_MAX_FLAGS = 512 };  // entries a table may have
typedef struct {
    const CliFlag *flags;
    size_t n;
    unsigned char *given;      // n entries, filled: which flags the command line set; or NULL
    const char *command;       // the subcommand in messages ("prepare"), or NULL
    const char *unknown_hint;  // follows an unknown flag; NULL lists the table's flags
    const char *bare_hint;     // follows an argument that is neither a flag nor a list item
    const char *usage;         // what --help prints as the error line; NULL: --help is unknown
    int strict;                // a value may be neither empty nor begin with "--"
} CliTable;

// Parses argv[1..argc-1] into dst. On a bad flag or value every rank ends with one line (all
// ranks parse the same argv). A CLI_LIST's items array is malloc'ed; the caller frees it.
void cli_parse(const CliTable *t, void *dst, int argc, char **argv);
// Whether the last cli_parse of t set flag `name` (or its alias); a flag sharing a setting with
// another counts as given when either spelling was.
int cli_given(const CliTable *t, const char *name);
// The name of value in choices (its first entry), or "?" when it has none.
const char *cli_choice_name(const CliChoice *choices, int value);

#endif
