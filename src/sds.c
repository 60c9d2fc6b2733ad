/* sds.c -- simple dynamic strings.
 *
 * See sds.h for the layout. The whole design is: keep the length and the
 * capacity in front of the bytes, keep a terminator after them, and hand
 * the caller a pointer to the bytes. Everything here maintains
 *
 *     hdr->len <= hdr->alloc <= SDS_MAX_LEN,   s[hdr->len] == '\0',
 *     the allocation is sizeof(hdr) + alloc + 1 bytes,
 *
 * and every size computation is checked against SDS_MAX_LEN before it is
 * used, so that no arithmetic can wrap into a short allocation.
 *
 * Functions taking a source pointer (sdscatlen, sdscpylen) accept one that
 * points into the destination itself: growing may move the destination, so
 * they remember the source as an offset first. sdscatprintf formats into a
 * temporary buffer for the same reason (an argument may be s).
 *
 * Memory comes from s_malloc/s_realloc/s_free, plain libc here and mapped to
 * the server's allocator by the build. A failed allocation aborts: callers
 * never check for NULL, as in Redis.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sds.h"

#include "zmalloc.h"

/* Through zmalloc so INFO used_memory counts strings. */
#define s_malloc zmalloc
#define s_realloc zrealloc
#define s_free zfree

/* Greedy growth doubles below this, then adds this much each time. */
#define SDS_MAX_PREALLOC (1024 * 1024)

static void sdsPanic(const char *msg) {
    fprintf(stderr, "sds: %s\n", msg);
    abort();
}

/* Bytes to request for a string of capacity `alloc`. */
static inline size_t sdsAllocBytes(size_t alloc) {
    if (alloc > SDS_MAX_LEN) sdsPanic("string larger than 4 GiB");
    return sizeof(struct sdshdr) + alloc + 1;
}

sds sdsnewlen(const void *init, size_t initlen) {
    struct sdshdr *sh = s_malloc(sdsAllocBytes(initlen));
    if (sh == NULL) sdsPanic("out of memory");
    sh->len = (uint32_t)initlen;
    sh->alloc = (uint32_t)initlen;
    if (init) {
        if (initlen) memcpy(sh->buf, init, initlen);
    } else {
        memset(sh->buf, 0, initlen);
    }
    sh->buf[initlen] = '\0';
    return sh->buf;
}

sds sdsnew(const char *init) {
    return init ? sdsnewlen(init, strlen(init)) : sdsnewlen("", 0);
}

sds sdsempty(void) {
    return sdsnewlen("", 0);
}

sds sdsdup(const sds s) {
    return sdsnewlen(s, sdslen(s));
}

sds sdsfromlonglong(long long value) {
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%lld", value);
    return sdsnewlen(buf, (size_t)n);
}

void sdsfree(sds s) {
    if (s == NULL) return;
    s_free(SDS_HDR(s));
}

/* ----------------------------- length control ---------------------------- */

void sdssetlen(sds s, size_t newlen) {
    if (newlen > sdsalloc(s)) sdsPanic("sdssetlen beyond the allocation");
    SDS_HDR(s)->len = (uint32_t)newlen;
    s[newlen] = '\0';
}

void sdsIncrLen(sds s, ssize_t incr) {
    size_t len = sdslen(s);
    if (incr >= 0) {
        if ((size_t)incr > sdsavail(s)) sdsPanic("sdsIncrLen past the allocation");
        len += (size_t)incr;
    } else {
        /* Negate in unsigned arithmetic: -SSIZE_MIN would overflow. */
        size_t dec = (size_t)0 - (size_t)incr;
        if (dec > len) sdsPanic("sdsIncrLen below zero");
        len -= dec;
    }
    SDS_HDR(s)->len = (uint32_t)len;
    s[len] = '\0';
}

void sdsupdatelen(sds s) {
    SDS_HDR(s)->len = (uint32_t)strlen(s);
}

void sdsclear(sds s) {
    SDS_HDR(s)->len = 0;
    s[0] = '\0';
}

/* -------------------------------- capacity ------------------------------- */

sds sdsMakeRoomFor(sds s, size_t addlen) {
    size_t len = sdslen(s);
    if (sdsavail(s) >= addlen) return s;
    if (addlen > SDS_MAX_LEN - len) sdsPanic("string larger than 4 GiB");

    size_t need = len + addlen;
    size_t newalloc = need < SDS_MAX_PREALLOC ? need * 2 : need + SDS_MAX_PREALLOC;
    if (newalloc > SDS_MAX_LEN) newalloc = SDS_MAX_LEN;   /* need still fits */

    struct sdshdr *sh = s_realloc(SDS_HDR(s), sdsAllocBytes(newalloc));
    if (sh == NULL) sdsPanic("out of memory");
    sh->alloc = (uint32_t)newalloc;
    return sh->buf;
}

sds sdsRemoveFreeSpace(sds s) {
    size_t len = sdslen(s);
    if (sdsalloc(s) == len) return s;
    struct sdshdr *sh = s_realloc(SDS_HDR(s), sdsAllocBytes(len));
    if (sh == NULL) sdsPanic("out of memory");
    sh->alloc = (uint32_t)len;
    return sh->buf;
}

size_t sdsAllocSize(const sds s) {
    return sizeof(struct sdshdr) + sdsalloc(s) + 1;
}

/* ------------------------------- appending ------------------------------- */

/* If p points into s's allocation, its offset from s; else SIZE_MAX. Done
 * on integers because comparing pointers into different objects is
 * undefined in C. */
static size_t sdsInnerOffset(const sds s, const void *p) {
    uintptr_t base = (uintptr_t)s, q = (uintptr_t)p;
    if (q >= base && q <= base + sdsalloc(s)) return (size_t)(q - base);
    return SIZE_MAX;
}

sds sdscatlen(sds s, const void *t, size_t len) {
    size_t curlen = sdslen(s);
    size_t off = sdsInnerOffset(s, t);
    s = sdsMakeRoomFor(s, len);
    if (off != SIZE_MAX) t = s + off;
    if (len) memmove(s + curlen, t, len);
    SDS_HDR(s)->len = (uint32_t)(curlen + len);
    s[curlen + len] = '\0';
    return s;
}

sds sdscat(sds s, const char *t) {
    return sdscatlen(s, t, strlen(t));
}

sds sdscatsds(sds s, const sds t) {
    return sdscatlen(s, t, sdslen(t));
}

sds sdscpylen(sds s, const char *t, size_t len) {
    size_t off = sdsInnerOffset(s, t);
    if (sdsalloc(s) < len) {
        s = sdsMakeRoomFor(s, len - sdslen(s));
        if (off != SIZE_MAX) t = s + off;
    }
    if (len) memmove(s, t, len);
    SDS_HDR(s)->len = (uint32_t)len;
    s[len] = '\0';
    return s;
}

sds sdscpy(sds s, const char *t) {
    return sdscpylen(s, t, strlen(t));
}

sds sdscatvprintf(sds s, const char *fmt, va_list ap) {
    char stackbuf[1024];
    va_list cpy;

    /* Most formats are short: one pass into the stack buffer. */
    va_copy(cpy, ap);
    int n = vsnprintf(stackbuf, sizeof(stackbuf), fmt, cpy);
    va_end(cpy);
    if (n < 0) return s;    /* encoding error: leave s unchanged */
    if ((size_t)n < sizeof(stackbuf)) return sdscatlen(s, stackbuf, (size_t)n);

    char *buf = s_malloc((size_t)n + 1);
    if (buf == NULL) sdsPanic("out of memory");
    va_copy(cpy, ap);
    int m = vsnprintf(buf, (size_t)n + 1, fmt, cpy);
    va_end(cpy);
    if (m == n) s = sdscatlen(s, buf, (size_t)n);
    s_free(buf);
    return s;
}

sds sdscatprintf(sds s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    s = sdscatvprintf(s, fmt, ap);
    va_end(ap);
    return s;
}

sds sdscatrepr(sds s, const char *p, size_t len) {
    static const char hex[] = "0123456789abcdef";
    s = sdsMakeRoomFor(s, len + 2);
    s = sdscatlen(s, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        switch (c) {
        case '\\': esc = "\\\\"; break;
        case '"':  esc = "\\\""; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\a': esc = "\\a"; break;
        case '\b': esc = "\\b"; break;
        }
        if (esc) {
            s = sdscatlen(s, esc, 2);
        } else if (c >= 0x20 && c < 0x7f) {
            /* Printable ASCII, decided without the locale. */
            s = sdscatlen(s, &p[i], 1);
        } else {
            char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            s = sdscatlen(s, x, 4);
        }
    }
    return sdscatlen(s, "\"", 1);
}

/* -------------------------------- editing -------------------------------- */

void sdsrange(sds s, ssize_t start, ssize_t end) {
    ssize_t len = (ssize_t)sdslen(s);   /* < 4 GiB, fits */
    if (len == 0) return;
    if (start < 0) {
        start += len;
        if (start < 0) start = 0;
    }
    if (end < 0) {
        end += len;
        if (end < 0) end = 0;
    }
    ssize_t newlen = start > end ? 0 : end - start + 1;
    if (newlen != 0) {
        if (start >= len) {
            newlen = 0;
        } else if (end >= len) {
            end = len - 1;
            newlen = end - start + 1;
        }
    }
    if (newlen && start) memmove(s, s + start, (size_t)newlen);
    sdssetlen(s, (size_t)newlen);
}

void sdstrim(sds s, const char *cset) {
    /* memchr over cset's bytes, not strchr: strchr would find the
     * terminator and so treat NUL bytes in s as trimmable. */
    size_t setlen = strlen(cset);
    size_t len = sdslen(s), sp = 0, ep = len;
    while (sp < ep && memchr(cset, (unsigned char)s[sp], setlen)) sp++;
    while (ep > sp && memchr(cset, (unsigned char)s[ep - 1], setlen)) ep--;
    if (sp && ep > sp) memmove(s, s + sp, ep - sp);
    sdssetlen(s, ep - sp);
}

/* ASCII only: the result must not depend on the process locale. */
void sdstolower(sds s) {
    size_t len = sdslen(s);
    for (size_t i = 0; i < len; i++)
        if (s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] + ('a' - 'A'));
}

void sdstoupper(sds s) {
    size_t len = sdslen(s);
    for (size_t i = 0; i < len; i++)
        if (s[i] >= 'a' && s[i] <= 'z') s[i] = (char)(s[i] - ('a' - 'A'));
}

int sdscmp(const sds s1, const sds s2) {
    size_t l1 = sdslen(s1), l2 = sdslen(s2);
    int cmp = memcmp(s1, s2, l1 < l2 ? l1 : l2);
    if (cmp != 0) return cmp;
    return (l1 > l2) - (l1 < l2);
}

/* -------------------------------- splitting ------------------------------ */

/* A growable token array shared by the two splitters. */
typedef struct {
    sds *v;
    int n, cap;
} tokvec;

static void tokvecPush(tokvec *tv, sds tok) {
    if (tv->n == tv->cap) {
        if (tv->cap > INT32_MAX / 2) sdsPanic("too many tokens");
        int cap = tv->cap ? tv->cap * 2 : 8;
        sds *v = s_realloc(tv->v, sizeof(sds) * (size_t)cap);
        if (v == NULL) sdsPanic("out of memory");
        tv->v = v;
        tv->cap = cap;
    }
    tv->v[tv->n++] = tok;
}

/* Never NULL, even with no tokens, so that NULL can mean "error". */
static sds *tokvecFinish(tokvec *tv, int *count) {
    if (tv->v == NULL) {
        tv->v = s_malloc(sizeof(sds));
        if (tv->v == NULL) sdsPanic("out of memory");
    }
    *count = tv->n;
    return tv->v;
}

sds *sdssplitlen(const char *s, size_t len, const char *sep, size_t seplen,
                 int *count) {
    tokvec tv = {0};
    *count = 0;
    if (seplen == 0) return NULL;
    if (len == 0) return tokvecFinish(&tv, count);

    size_t start = 0, j = 0;
    while (j + seplen <= len) {
        if (s[j] == sep[0] && memcmp(s + j, sep, seplen) == 0) {
            tokvecPush(&tv, sdsnewlen(s + start, j - start));
            j += seplen;
            start = j;
        } else {
            j++;
        }
    }
    tokvecPush(&tv, sdsnewlen(s + start, len - start));
    return tokvecFinish(&tv, count);
}

void sdsfreesplitres(sds *tokens, int count) {
    if (tokens == NULL) return;
    for (int i = 0; i < count; i++) sdsfree(tokens[i]);
    s_free(tokens);
}

static int isBlank(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int hexValue(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The grammar of an inline command / config line:
 *
 *   line   := blank* (arg (blank+ arg)*)? blank*
 *   arg    := bare+ | bare* (dquoted | squoted)     a"b c" is the arg 'ab c'
 *   bare   := any byte but blank, '"', '\''
 *   dquoted:= '"' (byte | '\\' esc)* '"'        esc: n r t b a \ " xHH, any
 *                                               other byte stands for itself
 *   squoted:= '\'' (byte | "\\'")* '\''         only \' is an escape
 *
 * A quoted part ends its argument: the closing quote must be followed by a
 * blank or the end of the line, so "foo"bar is an error rather than a
 * guess, and a quote left open is an error too.
 *
 * The scanner reads only through the terminating NUL: every look-ahead
 * (p[1], p[2], p[3]) is guarded by the previous byte not being NUL, so
 * malformed input cannot make it read past the line.
 */
sds *sdssplitargs(const char *line, int *argc) {
    const char *p = line;
    tokvec tv = {0};

    *argc = 0;
    if (line == NULL) return NULL;

    for (;;) {
        while (*p && isBlank((unsigned char)*p)) p++;
        if (*p == '\0') return tokvecFinish(&tv, argc);

        int inq = 0, insq = 0, done = 0;
        sds cur = sdsempty();
        while (!done) {
            if (inq) {
                if (*p == '\0') goto err;           /* unterminated "..." */
                if (*p == '\\' && p[1] == 'x' && hexValue((unsigned char)p[2]) >= 0 &&
                    hexValue((unsigned char)p[3]) >= 0) {
                    char byte = (char)(hexValue((unsigned char)p[2]) * 16 +
                                       hexValue((unsigned char)p[3]));
                    cur = sdscatlen(cur, &byte, 1);
                    p += 3;
                } else if (*p == '\\' && p[1] != '\0') {
                    char c;
                    p++;
                    switch (*p) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = *p; break;
                    }
                    cur = sdscatlen(cur, &c, 1);
                } else if (*p == '"') {
                    if (p[1] != '\0' && !isBlank((unsigned char)p[1])) goto err;
                    done = 1;
                } else {
                    cur = sdscatlen(cur, p, 1);
                }
            } else if (insq) {
                if (*p == '\0') goto err;           /* unterminated '...' */
                if (*p == '\\' && p[1] == '\'') {
                    p++;
                    cur = sdscatlen(cur, "'", 1);
                } else if (*p == '\'') {
                    if (p[1] != '\0' && !isBlank((unsigned char)p[1])) goto err;
                    done = 1;
                } else {
                    cur = sdscatlen(cur, p, 1);
                }
            } else {
                switch (*p) {
                case ' ': case '\t': case '\n': case '\r': case '\v': case '\f':
                case '\0':
                    done = 1;
                    break;
                case '"': inq = 1; break;
                case '\'': insq = 1; break;
                default: cur = sdscatlen(cur, p, 1); break;
                }
            }
            /* Never step over the terminator (a bare token ends on it). */
            if (*p) p++;
        }
        tokvecPush(&tv, cur);
        continue;

err:
        sdsfree(cur);
        sdsfreesplitres(tv.v, tv.n);
        *argc = 0;
        return NULL;
    }
}
