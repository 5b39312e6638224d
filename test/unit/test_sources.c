// test_sources: the driver test/integration/test_sources.sh checks data/format/sniff and data/source/source through.
//   test_sources sniff FILE...              one line per file: FILE<TAB>format<TAB>inner<TAB>readable<TAB>what<TAB>hint
//                                           (or FILE<TAB>error<TAB>message)
//   test_sources resolve SPEC CONFIG SPLIT  CONFIG "-" for none: "rc=1", "split=...", "desc=...", then each file
//                                           on a line "file=..."; or "rc=0"; or "rc=-1" and "err=..."
// Exits 0 whatever it finds (the script judges), 2 on bad usage.
#include <stdio.h>
#include <string.h>

#include "data/source/source.h"
#include "data/format/sniff.h"

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "sniff")) {
        for (int i = 2; i < argc; i++) {
            Sniff s;
            char err[1024];
            if (sniff_path(argv[i], &s, err, sizeof err)) printf("%s\terror\t%s\n", argv[i], err);
            else
                printf("%s\t%s\t%s\t%d\t%s\t%s\n", argv[i], sniff_format_name(s.format), sniff_format_name(s.inner), s.readable,
                       s.what, s.hint);
        }
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "resolve")) {
        SourceFiles f;
        char err[4096];
        int rc = source_resolve(argv[2], strcmp(argv[3], "-") ? argv[3] : NULL, argv[4], &f, err, sizeof err);
        printf("rc=%d\n", rc);
        if (rc < 0) printf("err=%s\n", err);
        if (rc > 0) {
            printf("split=%s\ndesc=%s\n", f.split, f.desc);
            for (int i = 0; i < f.nfiles; i++) printf("file=%s\n", f.files[i]);
        }
        source_files_free(&f);
        return 0;
    }
    fprintf(stderr, "usage: test_sources sniff FILE... | resolve SPEC CONFIG|- SPLIT\n");
    return 2;
}
