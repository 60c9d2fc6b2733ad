/* mooncake-check-aof -- checks (and cuts) the server's append-only log, in
 * the spirit of redis-check-aof.
 *
 *     mooncake-check-aof [--fix] <appendonlydir/appendonly.aof.manifest | file.aof>
 *
 * Reads each file the manifest lists (or the one file given) with the
 * server's own reader (aofformat.c), so what it calls valid is exactly what
 * the server loads: every record whole, of the six kinds with their arity,
 * every value's CRC64 right and, in format 2, every record's check. It prints one line per file, and for a damaged
 * one the offset of the first bad record and what is wrong there.
 *
 * --fix cuts the last file at its first bad record: a tail a crash cut, or
 * damage after which nothing can be trusted. Only the last file: cutting an
 * earlier one would make the files after it replay on a state they were not
 * written against, so damage there is reported and left for a person (the
 * server refuses to start on it). Exit status: 0 valid (after --fix), 1
 * damage left, 2 the files could not be read.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aofformat.h"

#define MAX_RECORD ((size_t)1 << 40)

/* 0 valid, 1 damaged (cut when fix), 2 unreadable. */
static int checkFile(const char *path, const char *label, int fix) {
    int fd = open(path, fix ? O_RDWR : O_RDONLY);
    if (fd == -1) {
        printf("%s: cannot open: %s\n", label, strerror(errno));
        return 2;
    }
    struct stat st;
    if (fstat(fd, &st) == -1) {
        printf("%s: cannot stat: %s\n", label, strerror(errno));
        close(fd);
        return 2;
    }
    /* Only a regular file has a size to map: a directory failed as "cannot
     * map: No such device", and a FIFO or a device (size 0) was "valid". */
    if (!S_ISREG(st.st_mode)) {
        printf("%s: not a regular file\n", label);
        close(fd);
        return 2;
    }
    size_t len = (size_t)st.st_size;
    const char *map = NULL;
    if (len) {
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            printf("%s: cannot map: %s\n", label, strerror(errno));
            close(fd);
            return 2;
        }
    }
    size_t off = 0, next;
    long long records = 0;
    aofRecord rec;
    char why[128];
    int version;
    int rc = aofFileFormat(map, len, &version, &off, why, sizeof(why));
    if (rc == AOF_REC_CORRUPT) {
        /* Not cut even with --fix: a newer build's file is not damage. */
        printf("%s: cannot be read: %s\n", label, why);
        if (map) munmap((void *)map, len);
        close(fd);
        return 1;
    }
    /* As the server loads: a MULTI ... EXEC group is whole or is cut as one. */
    size_t group = SIZE_MAX;
    while (rc == AOF_REC_OK &&
           (rc = aofNextLogRecord(map, len, off, MAX_RECORD, version, &rec, &next, why, sizeof(why))) == AOF_REC_OK) {
        if ((rec.type == AOF_REC_MULTI && group != SIZE_MAX) || (rec.type == AOF_REC_EXEC && group == SIZE_MAX)) {
            rc = AOF_REC_CORRUPT;
            snprintf(why, sizeof(why), "%s", rec.type == AOF_REC_MULTI ? "MULTI inside a MULTI" : "EXEC without MULTI");
            break;
        }
        if (rec.type == AOF_REC_MULTI) group = off;
        if (rec.type == AOF_REC_EXEC) group = SIZE_MAX;
        records++;
        off = next;
    }
    if (rc == AOF_REC_END && group != SIZE_MAX) {
        rc = AOF_REC_TRUNCATED;
        snprintf(why, sizeof(why), "the file ends inside a MULTI ... EXEC group");
    }
    if (rc == AOF_REC_TRUNCATED && group != SIZE_MAX) off = group;
    int result = 0;
    if (rc == AOF_REC_END) {
        printf("%s: format %d, %lld records, %zu bytes: valid\n", label, version, records, len);
    } else {
        printf("%s: %s at offset %zu of %zu, after %lld valid records: %s\n", label,
               rc == AOF_REC_TRUNCATED ? "truncated" : "corrupt", off, len, records, why);
        result = 1;
        if (fix) {
            if (ftruncate(fd, (off_t)off) == -1 || fsync(fd) == -1) {
                printf("%s: cannot cut: %s\n", label, strerror(errno));
                result = 2;
            } else {
                printf("%s: cut %zu bytes at offset %zu: now %lld records, valid\n", label, len - off, off, records);
                result = 0;
            }
        }
    }
    if (map) munmap((void *)map, len);
    close(fd);
    return result;
}

/* --help: stdout and 0; misuse: stderr and 2. */
static int usage(FILE *f) {
    fprintf(f, "Usage: mooncake-check-aof [--fix] <appendonlydir/appendonly.aof.manifest | file.aof>\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    int fix = 0;
    const char *path = NULL;
    for (int j = 1; j < argc; j++) {
        if (!strcmp(argv[j], "--fix")) fix = 1;
        else if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) return usage(stdout);
        else if (argv[j][0] == '-' && argv[j][1] != '\0') {
            /* A mistyped option (--fxi) used to be taken for the file and
             * answered "cannot open"; a file named so is ./-name. */
            fprintf(stderr, "mooncake-check-aof: unknown option %s\n", argv[j]);
            return usage(stderr);
        } else if (path == NULL) path = argv[j];
        else return usage(stderr);
    }
    if (path == NULL) return usage(stderr);
    size_t plen = strlen(path);
    const char *suffix = ".manifest";
    if (plen < strlen(suffix) || strcmp(path + plen - strlen(suffix), suffix) != 0) return checkFile(path, path, fix);

    /* A manifest: its files, in order, in its directory. */
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        printf("%s: cannot open: %s\n", path, strerror(errno));
        return 2;
    }
    static char text[AOF_MANIFEST_MAX_FILES * 300];
    size_t got = fread(text, 1, sizeof(text), fp);
    /* A read that fails (a directory named *.manifest: EISDIR) is not an
     * empty manifest: that said "0 files", "The AOF is valid", exit 0. */
    if (ferror(fp)) {
        printf("%s: cannot read: %s\n", path, strerror(errno ? errno : EIO));
        fclose(fp);
        return 2;
    }
    fclose(fp);
    static aofManifest m;
    char why[160];
    if (got == sizeof(text) || aofManifestParse(text, got, &m, why, sizeof(why)) == -1) {
        printf("%s: not a valid manifest: %s\n", path, got == sizeof(text) ? "too long" : why);
        return 1;
    }
    char *dircopy = strdup(path);
    const char *dir = dirname(dircopy);
    int last = -1, worst = 0;
    for (int j = 0; j < m.nfiles; j++)
        if (m.files[j].type != 'h') last = j;
    printf("%s: %d files\n", path, m.nfiles);
    for (int j = 0; j < m.nfiles; j++) {
        aofManifestFile *f = &m.files[j];
        if (f->type == 'h') {
            printf("%s: history (not loaded)\n", f->name);
            continue;
        }
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", dir, f->name);
        int rc = checkFile(full, f->name, fix && j == last);
        if (rc == 1 && fix && j != last)
            printf("%s: not cut: it is not the last file, and the files after it were written against what it "
                   "held\n", f->name);
        if (rc > worst) worst = rc;
    }
    free(dircopy);
    printf("%s\n", worst == 0 ? "The AOF is valid" : worst == 1 ? "The AOF is damaged" : "The AOF could not be read");
    return worst;
}
