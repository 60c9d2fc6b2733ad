/* sds.h -- simple dynamic strings: binary-safe, length-prefixed C strings.
 *
 * An sds is a plain `char *` that points just past a small header:
 *
 *     +-----------+-------------+----------------------+---+--------------+
 *     | len (u32) | alloc (u32) | len bytes of content | 0 | alloc-len    |
 *     +-----------+-------------+----------------------+---+ spare bytes  |
 *                               ^ sds points here                         |
 *
 * so it can be passed to any function taking a C string (printf, strcmp on
 * text content) while its length is O(1) and it may contain NUL bytes.
 *
 * Invariants: len <= alloc; s[len] == '\0' always (there is room for it
 * beyond alloc); alloc < 4 GiB. Functions that may grow the string return
 * the (possibly moved) new pointer, which the caller must use in place of
 * the old one: s = sdscat(s, "x"). Growing aborts on out-of-memory or when
 * the string would pass 4 GiB; a KVCache server stores large values in
 * segments, never in an sds, so that limit is never legitimately reached.
 *
 * One header type for all lengths (Redis has five): 8 bytes of overhead is
 * little next to the allocator's own rounding, and one layout keeps every
 * accessor branch-free.
 */
#ifndef SDS_H
#define SDS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef char *sds;

struct sdshdr {
    uint32_t len;       /* bytes used, excluding the terminator */
    uint32_t alloc;     /* bytes available, excluding header and terminator */
    char buf[];
};

#define SDS_HDR(s) ((struct sdshdr *)((s) - sizeof(struct sdshdr)))
#define SDS_MAX_LEN ((size_t)UINT32_MAX)

static inline size_t sdslen(const sds s) {
    return SDS_HDR(s)->len;
}

static inline size_t sdsalloc(const sds s) {
    return SDS_HDR(s)->alloc;
}

static inline size_t sdsavail(const sds s) {
    return SDS_HDR(s)->alloc - SDS_HDR(s)->len;
}

/* Creation and destruction. sdsnewlen with init == NULL gives initlen zero
 * bytes. sdsnew(NULL) is the empty string. sdsfree(NULL) is a no-op. */
sds sdsnewlen(const void *init, size_t initlen);
sds sdsnew(const char *init);
sds sdsempty(void);
sds sdsdup(const sds s);
sds sdsfromlonglong(long long value);
void sdsfree(sds s);

/* Length control. sdssetlen sets the length (<= alloc, else abort) and
 * writes the terminator. sdsIncrLen commits bytes written directly into the
 * spare space after sdsMakeRoomFor (incr > 0), or drops bytes from the end
 * (incr < 0); out-of-range values abort. sdsupdatelen sets len to strlen(s),
 * after the content was edited as a C string. */
void sdssetlen(sds s, size_t newlen);
void sdsIncrLen(sds s, ssize_t incr);
void sdsupdatelen(sds s);
void sdsclear(sds s);

/* Capacity. sdsMakeRoomFor guarantees addlen spare bytes, growing greedily
 * (double up to 1 MiB, then +1 MiB) so repeated appends are amortised O(1).
 * sdsRemoveFreeSpace gives the spare bytes back. sdsAllocSize is the bytes
 * requested from the allocator (header, content, spare, terminator). */
sds sdsMakeRoomFor(sds s, size_t addlen);
sds sdsRemoveFreeSpace(sds s);
size_t sdsAllocSize(const sds s);

/* Appending and copying. The source may point into s itself. */
sds sdscatlen(sds s, const void *t, size_t len);
sds sdscat(sds s, const char *t);
sds sdscatsds(sds s, const sds t);
sds sdscpylen(sds s, const char *t, size_t len);
sds sdscpy(sds s, const char *t);
sds sdscatvprintf(sds s, const char *fmt, va_list ap);
#ifdef __GNUC__
sds sdscatprintf(sds s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#else
sds sdscatprintf(sds s, const char *fmt, ...);
#endif
/* Append p[0..len) quoted and escaped as redis-cli shows strings. */
sds sdscatrepr(sds s, const char *p, size_t len);

/* In-place editing. sdsrange keeps s[start..end], both inclusive, negative
 * indexes counting from the end (-1 is the last byte), clamped to the
 * string. sdstrim removes leading and trailing bytes found in cset. */
void sdsrange(sds s, ssize_t start, ssize_t end);
void sdstrim(sds s, const char *cset);
void sdstolower(sds s);
void sdstoupper(sds s);

/* Comparison: memcmp order, a prefix sorts first. <0, 0 or >0. */
int sdscmp(const sds s1, const sds s2);

/* Split s[0..len) at every occurrence of sep[0..seplen). Empty tokens are
 * kept ("a,,b" gives 3). Returns an array of *count sds (an empty array for
 * len == 0), or NULL with *count = 0 if seplen == 0. Free with
 * sdsfreesplitres. */
sds *sdssplitlen(const char *s, size_t len, const char *sep, size_t seplen,
                 int *count);
void sdsfreesplitres(sds *tokens, int count);

/* Tokenise an inline command or config line (see sds.c for the grammar).
 * Returns an array of *argc sds (possibly empty, never NULL, for a valid
 * line), or NULL on a syntax error (unbalanced quotes, a closing quote not
 * followed by a space or the end). Free with sdsfreesplitres. */
sds *sdssplitargs(const char *line, int *argc);

#endif
