// source: the model source's files, from a folder or a checkpoint's /source (source.h).
#include "source.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/err.h"
#include "../base/path.h"
#include "../comm/comm.h"
#include "h5.h"

void ckpt_source_free(CkptSource *src) {
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) free(src->text[i]);
    memset(src, 0, sizeof *src);
}

const char *ckpt_source_from_dir(const char *dir, CkptSource *src) {
    static char msg[1400];
    memset(src, 0, sizeof *src);
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) {
        char *path = path_join(dir, ckpt_source_names[i]);
        FILE *f = path_fopen_read(path);
        struct stat st;
        if (!f && errno == ENOENT) {
            free(path);
            continue;
        }
        const char *why = !f || fstat(fileno(f), &st) != 0 ? path_strerror(errno) : !S_ISREG(st.st_mode) ? "not a regular file"
                          : (uint64_t)st.st_size > CKPT_SOURCE_MAX_BYTES ? "larger than the 16 MiB fsdpc keeps of such a file" : NULL;
        size_t n = why ? 0 : (size_t)st.st_size;
        char *text = n ? mallocCheck(n) : NULL;
        if (text && fread(text, 1, n, f) != n) why = "a short read";
        if (f) fclose(f);
        if (why) {
            free(text);
            ckpt_source_free(src);
            err_text(msg, sizeof msg, "cannot read '%s': %s", path, why);
            free(path);
            return msg;
        }
        free(path);
        src->text[i] = text, src->len[i] = n;
    }
    return NULL;
}

const char *ckpt_source_read(const char *file, CkptSource *src) {
    static char msg[1600];
    char path[64];
    memset(src, 0, sizeof *src);
    hid_t f = h5_open(file, 0, 0);
    if (f < 0) return h5_open_error(file);
    const char *e = NULL;
    const char *linked = h5_linked(f, "source");
    if (linked)
        e = err_text(msg, sizeof msg, "checkpoint '%s': %s: fsdpc reads only what the checkpoint file itself stores (a crafted or "
                     "rewritten file?)", file, linked);
    int has = !e && H5Lexists(f, "source", H5P_DEFAULT) > 0;
    for (int i = 0; has && !e && i < CKPT_SOURCE_FILES; i++) {
        snprintf(path, sizeof path, "source/%s", ckpt_source_names[i]);
        if (H5Lexists(f, path, H5P_DEFAULT) <= 0) continue;
        const char *why;
        hid_t ds = h5_open_stored(f, path, &why), sp = ds < 0 ? -1 : H5Dget_space(ds), ty = ds < 0 ? -1 : H5Dget_type(ds);
        hsize_t n = 0;
        int ok = sp >= 0 && ty >= 0 && H5Sget_simple_extent_ndims(sp) == 1 && H5Sget_simple_extent_dims(sp, &n, NULL) == 1 &&
                 H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && n > 0 && n <= CKPT_SOURCE_MAX_BYTES;
        char *text = ok ? mallocCheck((size_t)n) : NULL;
        if (ok && H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0) ok = 0;
        if (ok) src->text[i] = text, src->len[i] = (size_t)n;
        else free(text);
        if (!ok && why)
            e = err_text(msg, sizeof msg, "checkpoint '%s': /%s is %s: fsdpc reads only what the checkpoint file itself stores "
                         "(a crafted or rewritten file?)", file, path, why);
        else if (!ok)
            e = err_text(msg, sizeof msg, "checkpoint '%s': /%s is not a 1-D byte dataset of 1 byte to 16 MiB (corrupt file?)", file,
                          path);
        if (ty >= 0) H5Tclose(ty);
        if (sp >= 0) H5Sclose(sp);
        if (ds >= 0) H5Dclose(ds);
    }
    H5Fclose(f);
    if (e) ckpt_source_free(src);
    return e;
}

void ckpt_source_share(CkptSource *src) {
    uint64_t len[CKPT_SOURCE_FILES];
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) len[i] = src->text[i] ? src->len[i] : 0;
    comm_bcast_bytes(comm_world(), len, sizeof len, 0);
    for (int i = 0; i < CKPT_SOURCE_FILES; i++) {
        if (comm_info.rank != 0) {
            free(src->text[i]);
            src->text[i] = len[i] ? mallocCheck((size_t)len[i]) : NULL;
            src->len[i] = (size_t)len[i];
        }
        if (len[i]) comm_bcast_bytes(comm_world(), src->text[i], (size_t)len[i], 0);
    }
}

