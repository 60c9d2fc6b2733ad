/* mooncake-cli.c -- put, get, list and remove KVCache objects from a shell.
 *
 * Why a tool of its own, when redis-cli already talks to the server: a
 * redis-cli GET/SET moves the value inside RESP through the server's own
 * pool, while an inference engine moves it with libmooncake, by PUT.START,
 * a direct copy into a segment (shared memory or the TCP data plane) and
 * PUT.END. This tool is a thin shell over that library, so a file put here
 * is stored exactly as an engine would store it and can be read by one, and
 * --transport lets an operator check one data path by hand.
 *
 * Shape of each command:
 *
 *  - put: PUT.START reserves the value's size up front, so the value cannot
 *    be streamed; it must be in memory, whole. A regular file is mapped
 *    read-only rather than read, so mc_put copies it straight from the page
 *    cache into the segment (one copy over shm, none before the socket over
 *    tcp) and a large file never needs a heap buffer as big as itself.
 *    Stdin and other files that cannot be mapped are read into a growing
 *    buffer. (A file truncated by someone else while mapped gets us SIGBUS:
 *    the price of not copying, and a put of a file being rewritten would be
 *    garbage anyway.)
 *
 *  - get: mc_size, then mc_get into a buffer of that size. A REPLACE between
 *    the two may make the value larger (MC_ERR_TOO_SMALL): we measure again,
 *    a few times. The bytes go to a temporary file beside the target and
 *    are renamed over it only once complete and fsynced, so a get that fails
 *    half way (connection lost, lease expired, disk full) leaves the old
 *    file, or none, never a truncated value that looks like a good one.
 *    A target that exists and is not a regular file (/dev/null, a FIFO) is
 *    written in place: renaming over it would replace the device node.
 *
 *  - ls: libmooncake has no listing call on purpose (an engine looks up keys
 *    it computed from its own prompts). We open a RESP connection of the
 *    library's own kind (mc_conn.h, linked from libmooncake.a), walk SCAN
 *    MATCH to the end, sort the names bytewise (like LC_ALL=C sort) and
 *    drop duplicates, since SCAN may return a key twice across a rehash.
 *    The size of each comes from mc_size, which is a read: it grants a
 *    lease, so listing delays the reuse of replaced versions by lease-ttl.
 *    SCAN only names keys with a complete version; a key removed and put
 *    again between the SCAN and its probe answers NOTREADY and is listed as
 *    "pending", one removed outright is left out. SCAN sees one node's
 *    keys: against a cluster (CLUSTER SLOTS answers a map) every primary
 *    is walked, and a key found on both ends of a slot migration is listed
 *    once. That is the tool's only raw RESP; every keyed command goes
 *    through libmooncake, which follows -MOVED/-ASK as `redis-cli -c` does.
 *
 *  - rm: REMOVE per key; a missing key counts 0 and is no error, as DEL.
 *
 * Connecting. The first connect is tried again while the address refuses
 * or is not there yet (a server restarting, a node being replaced in a
 * failover), 50 ms doubling to 1 s apart, for at most --connect-retry ms
 * (default 2000; 0 once): a script run during such a pause waits for it,
 * and one pointed at nothing still fails within seconds. A bad address, a
 * name that does not resolve, or a refused password fails at once.
 * After that, every call rides through on its own (libmooncake's retries).
 *
 * Exit status: 0 done, 1 failed (one line on stderr, "mooncake-cli: what:
 * short error name: the library's or the server's own words"), 2 bad usage.
 * Every command opens one handle; nothing is cached between runs. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mc_conn.h"
#include "mooncake.h"

#define CLI_NAME "mooncake-cli"
#define CLI_CONNECT_MS 5000     /* ls's SCAN connection: libmooncake's defaults */
#define CLI_IO_MS 30000
#define CLI_GET_ATTEMPTS 3      /* size/get rounds lost to a growing REPLACE */
#define CLI_SCAN_COUNT "1000"

static struct {
    const char *host;
    int port;
    const char *sock;
    const char *user;           /* ACL user, NULL: default */
    const char *password;
    int transport;
    int replace;
    int replicas;               /* 0: the server's default */
    int connect_retry_ms;       /* how long the first connect is tried again */
    char uri[PATH_MAX + 16];
} config = {"127.0.0.1", 6379, NULL, NULL, NULL, MC_TRANSPORT_AUTO, 0, 0, 2000, ""};

/* ---- messages ------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
"Usage: " CLI_NAME " [-h host] [-p port] [-s unixsocket] [--user name] [-a password]\n"
"                    [--transport auto|shm|tcp] [--connect-retry ms] <command> ...\n"
"\n"
"Stores and reads KVCache objects through libmooncake, as an inference engine\n"
"does (shared memory on the same host, the TCP data plane otherwise).\n"
"\n"
"Commands:\n"
"  put <key> <file>     store the file's bytes under key ('-': stdin)\n"
"      --replace        write a new version of an existing key\n"
"      --replicas <n>   replicas to write, 1..8 (default: the server's)\n"
"  get <key> <file>     write the value to file ('-': stdout); the file is\n"
"                       replaced only once the whole value has arrived\n"
"  ls [pattern]         'key<TAB>size' per key matching the glob pattern,\n"
"                       sorted; 'pending' for a key whose put has not ended\n"
"  rm <key>...          remove keys; prints how many existed\n"
"\n"
"Options:\n"
"  -h <host>            server host (default 127.0.0.1)\n"
"  -p <port>            server port (default 6379)\n"
"  -s <unixsocket>      connect by unix socket (overrides -h/-p); shared\n"
"                       memory works either way (the server names its socket)\n"
"  --user <name>        AUTH as this ACL user (with -a; redis-cli's option)\n"
"  -a <password>        AUTH with this password\n"
"  --transport <t>      force the data path: auto (default), shm or tcp\n"
"  --connect-retry <ms> try the first connect again while the server refuses\n"
"                       or is not there yet, for up to ms (default 2000; 0: once)\n"
"  --help               this text\n"
"  -v, --version        print the version and exit\n"
"  --                   the arguments after it are not options\n"
"\n"
"Exit status: 0 success, 1 failure (reason on stderr), 2 bad usage.\n");
}

/* Bad usage: the reason, a pointer to --help, exit 2. */
static void usageError(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usageError(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, CLI_NAME ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '" CLI_NAME " --help'.\n");
    exit(2);
}

/* A short fixed name per error, so a script (or a person) can match one
 * word whatever the server's wording; the words follow it. */
static const char *errName(int rc) {
    switch (rc) {
    case MC_ERR_NOT_FOUND: return "not found";
    case MC_ERR_EXISTS: return "exists";
    case MC_ERR_NOSPACE: return "no space";
    case MC_ERR_LEASE_EXPIRED: return "lease expired";
    case MC_ERR_TOO_SMALL: return "too small";
    case MC_ERR_INVALID: return "invalid";
    case MC_ERR_AUTH: return "auth";
    case MC_ERR_PROTOCOL: return "protocol";
    case MC_ERR_IO: return "io";
    case MC_ERR_UNSUPPORTED: return "unsupported";
    case MC_ERR_NOT_READY: return "not ready";
    case MC_ERR_NOMEM: return "out of memory";
    default: return "error";
    }
}

/* "mooncake-cli: <what>: <name>: <detail>" for a library error; returns 1,
 * the exit status. The detail is mc_last_error when the library kept one,
 * else mc_strerror. */
static int mcFail(mc_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int mcFail(mc_client *c, int rc, const char *fmt, ...) {
    const char *detail = c ? mc_last_error(c) : "";
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, CLI_NAME ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s: %s\n", errName(rc), detail && detail[0] ? detail : mc_strerror(rc));
    return 1;
}

/* "mooncake-cli: <what>: <strerror(errno)>"; returns 1. */
static int sysFail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sysFail(const char *fmt, ...) {
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, CLI_NAME ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s\n", strerror(saved));
    return 1;
}

/* ---- files --------------------------------------------------------------- */

/* A put's value: mapped from a file (mapped != 0) or read into the heap. */
typedef struct cliInput {
    char *data;
    size_t len;
    int mapped;
} cliInput;

static int readAll(int fd, cliInput *in) {
    size_t cap = 0;
    for (;;) {
        if (in->len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            char *p = ncap > cap ? realloc(in->data, ncap) : NULL;
            if (p == NULL) {
                errno = ENOMEM;
                return -1;
            }
            in->data = p;
            cap = ncap;
        }
        ssize_t n = read(fd, in->data + in->len, cap - in->len);
        if (n == 0) return 0;
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        in->len += (size_t)n;
    }
}

/* path "-" is stdin. 0, or -1 with errno set. */
static int inputLoad(const char *path, cliInput *in) {
    memset(in, 0, sizeof(*in));
    if (!strcmp(path, "-")) return readAll(STDIN_FILENO, in);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    int rc = fstat(fd, &st);
    if (rc == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        if ((unsigned long long)st.st_size > SIZE_MAX) {
            errno = EFBIG;
            rc = -1;
        } else {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) {
                madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
                in->data = p;
                in->len = (size_t)st.st_size;
                in->mapped = 1;
            } else {
                rc = readAll(fd, in); /* a file system that cannot map */
            }
        }
    } else if (rc == 0) {
        rc = readAll(fd, in);       /* empty, a FIFO, a character device */
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

static void inputFree(cliInput *in) {
    if (in->mapped) munmap(in->data, in->len);
    else free(in->data);
    memset(in, 0, sizeof(*in));
}

static int writeAll(int fd, const char *p, size_t len) {
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes get key's value to path as the design comment says: stdout for "-", in
 * place for an existing non-regular file, else a temporary file renamed
 * over path. 0, or 1 after the message. */
static int outputStore(const char *key, const char *path, const char *buf, size_t len) {
    if (!strcmp(path, "-")) return writeAll(STDOUT_FILENO, buf, len) ? sysFail("get %s: write stdout", key) : 0;

    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) return sysFail("get %s: open %s", key, path);
        int failed = writeAll(fd, buf, len);
        int saved = errno;
        if (close(fd) != 0 && !failed) failed = -1, saved = errno;
        errno = saved;
        return failed ? sysFail("get %s: write %s", key, path) : 0;
    }

    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return sysFail("get %s: %s", key, path);
    }
    int fd = mkstemp(tmp);
    if (fd < 0) return sysFail("get %s: create a temporary file beside %s", key, path);
    /* mkstemp makes it 0600; the result should look like any file we
     * create (or keep the mode of the one it replaces). */
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = exists ? (st.st_mode & 07777) : (0666 & ~mask);
    if (writeAll(fd, buf, len) != 0) {
        sysFail("get %s: write %s", key, tmp);
        goto err;
    }
    if (fchmod(fd, mode) != 0) {
        sysFail("get %s: chmod %s", key, tmp);
        goto err;
    }
    /* Without it a crash soon after the rename could leave an empty file
     * under the new name on some file systems: the very partial file the
     * rename is here to prevent. */
    if (fsync(fd) != 0) {
        sysFail("get %s: fsync %s", key, tmp);
        goto err;
    }
    if (close(fd) != 0) {
        fd = -1;
        sysFail("get %s: close %s", key, tmp);
        goto err;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        sysFail("get %s: rename %s to %s", key, tmp, path);
        goto err;
    }
    return 0;

err:
    if (fd >= 0) close(fd);
    unlink(tmp);
    return 1;
}

/* ---- commands ------------------------------------------------------------ */

static int putCommand(mc_client *c, int argc, char **argv) {
    (void)argc;
    const char *key = argv[0], *path = argv[1];
    cliInput in;
    int ret = 1;
    if (inputLoad(path, &in) != 0) {
        sysFail("put %s: read %s", key, strcmp(path, "-") ? path : "stdin");
        goto err;
    }
    mc_put_opts opts = {0};
    opts.replicas = config.replicas;
    opts.replace = config.replace;
    int rc = mc_put(c, key, strlen(key), in.data, in.len, &opts);
    if (rc == MC_ERR_EXISTS) {
        /* The server's words name its protocol option ("use REPLACE"); a
         * shell user's is the flag, so the advice names the flag. */
        fprintf(stderr, CLI_NAME ": put %s: %s: the key has a value (use --replace to write a new version)\n",
                key, errName(rc));
        goto err;
    }
    if (rc != MC_OK) {
        mcFail(c, rc, "put %s", key);
        goto err;
    }
    ret = 0;

err:
    inputFree(&in);
    return ret;
}

static int getCommand(mc_client *c, int argc, char **argv) {
    (void)argc;
    const char *key = argv[0], *path = argv[1];
    size_t klen = strlen(key);
    char *buf = NULL;
    long long got = MC_ERR_TOO_SMALL;
    for (int attempt = 0; attempt < CLI_GET_ATTEMPTS && got == MC_ERR_TOO_SMALL; attempt++) {
        long long size = mc_size(c, key, klen);
        if (size < 0) {
            got = size;
            break;
        }
        free(buf);
        buf = malloc(size ? (size_t)size : 1);
        if (buf == NULL) {
            errno = ENOMEM;
            sysFail("get %s: a buffer of %lld bytes", key, size);
            return 1;
        }
        got = mc_get(c, key, klen, buf, (size_t)size);
    }
    int ret = got < 0 ? mcFail(c, (int)got, "get %s", key) : outputStore(key, path, buf, (size_t)got);
    free(buf);
    return ret;
}

typedef struct cliKey {
    char *name;
    size_t len;
} cliKey;

static int keyCompare(const void *a, const void *b) {
    const cliKey *x = a, *y = b;
    int d = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return d ? d : (x->len > y->len) - (x->len < y->len);
}

/* A growing list of key names (taken from SCAN replies). */
typedef struct cliKeys {
    cliKey *v;
    size_t n, cap;
} cliKeys;

/* Walks SCAN MATCH pattern on one connection to the end, adding every
 * name to keys. 0, or 1 after the message. */
static int scanNode(mcConn *conn, const char *pattern, cliKeys *keys) {
    char cursor[32] = "0";
    do {
        const char *cmd[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", CLI_SCAN_COUNT};
        mcReply *r = mcConnCommand(conn, 6, cmd, NULL);
        if (r == NULL) {
            fprintf(stderr, CLI_NAME ": ls: SCAN %s: io: %s\n", conn->uri, conn->err);
            return 1;
        }
        if (r->type == MCR_ERROR) {
            fprintf(stderr, CLI_NAME ": ls: SCAN %s: %s\n", conn->uri, r->str);
            mcReplyFree(r);
            return 1;
        }
        if (r->type != MCR_ARRAY || r->elements != 2 || r->element[0]->type != MCR_BULK ||
            r->element[0]->len >= sizeof(cursor) || r->element[1]->type != MCR_ARRAY) {
            fprintf(stderr, CLI_NAME ": ls: SCAN: protocol: unexpected reply\n");
            mcReplyFree(r);
            return 1;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            mcReply *k = r->element[1]->element[i];
            /* An empty name is a legal Redis key but no libmooncake key. */
            if (k->type != MCR_BULK || k->len == 0) continue;
            if (keys->n == keys->cap) {
                size_t ncap = keys->cap ? keys->cap * 2 : 64;
                cliKey *p = realloc(keys->v, ncap * sizeof(*p));
                if (p == NULL) {
                    fprintf(stderr, CLI_NAME ": ls: out of memory\n");
                    mcReplyFree(r);
                    return 1;
                }
                keys->v = p;
                keys->cap = ncap;
            }
            /* Take the reply's string rather than copy it. */
            keys->v[keys->n].name = k->str;
            keys->v[keys->n].len = k->len;
            k->str = NULL;
            keys->n++;
        }
        mcReplyFree(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

static mcConn *cliOpen(const char *uri) {
    char err[256];
    mcConn *conn = mcConnOpen(uri, CLI_CONNECT_MS, CLI_IO_MS, err, sizeof(err));
    if (conn == NULL) {
        fprintf(stderr, CLI_NAME ": ls: %s\n", err);
        return NULL;
    }
    if (mcConnAuth(conn, config.user, config.password) != MC_OK) {
        fprintf(stderr, CLI_NAME ": ls: auth %s: %s\n", uri, conn->err);
        mcConnClose(conn);
        return NULL;
    }
    return conn;
}

/* SCAN walks one node's keys. Against a cluster every primary that serves
 * slots is walked (the one we are connected to on this connection); a key
 * met twice (on both ends of a migration) is listed once after the sort.
 * 0, or 1 after the message. */
static int scanAll(mcConn *conn, const char *pattern, cliKeys *keys) {
    const char *slots[2] = {"CLUSTER", "SLOTS"}, *myid[2] = {"CLUSTER", "MYID"};
    mcReply *map = mcConnCommand(conn, 2, slots, NULL);
    if (map == NULL) {
        fprintf(stderr, CLI_NAME ": ls: io: %s\n", conn->err);
        return 1;
    }
    if (map->type != MCR_ARRAY) { /* no cluster support: one node */
        mcReplyFree(map);
        return scanNode(conn, pattern, keys);
    }
    mcReply *me = mcConnCommand(conn, 2, myid, NULL);
    int ret = 0, self_done = 0;
    char (*seen)[300] = calloc(map->elements + 1, sizeof(*seen));
    size_t nseen = 0;
    for (size_t i = 0; seen && ret == 0 && i < map->elements; i++) {
        const mcReply *e = map->element[i], *nd = e->elements >= 3 ? e->element[2] : NULL;
        if (e->type != MCR_ARRAY || nd == NULL || nd->type != MCR_ARRAY || nd->elements < 2 ||
            nd->element[0]->type != MCR_BULK || nd->element[1]->type != MCR_INT)
            continue;
        if (me && me->type == MCR_BULK && nd->elements >= 3 && nd->element[2]->type == MCR_BULK &&
            !strcmp(nd->element[2]->str, me->str)) {
            if (!self_done) ret = scanNode(conn, pattern, keys);
            self_done = 1;
            continue;
        }
        char uri[300];
        int v6 = strchr(nd->element[0]->str, ':') != NULL;
        snprintf(uri, sizeof(uri), v6 ? "tcp://[%s]:%lld" : "tcp://%s:%lld", nd->element[0]->str, nd->element[1]->integer);
        int dup = 0;
        for (size_t j = 0; j < nseen && !dup; j++) dup = !strcmp(seen[j], uri);
        if (dup) continue;
        snprintf(seen[nseen++], sizeof(seen[0]), "%s", uri);
        mcConn *other = cliOpen(uri);
        ret = other ? scanNode(other, pattern, keys) : 1;
        mcConnClose(other);
    }
    if (seen == NULL) {
        fprintf(stderr, CLI_NAME ": ls: out of memory\n");
        ret = 1;
    }
    free(seen);
    mcReplyFree(me);
    mcReplyFree(map);
    return ret;
}

static int lsCommand(mc_client *c, int argc, char **argv) {
    const char *pattern = argc ? argv[0] : "*";
    cliKeys all = {NULL, 0, 0};
    int ret = 1;
    mcConn *conn = cliOpen(config.uri);
    if (conn == NULL || scanAll(conn, pattern, &all) != 0) goto err;
    cliKey *keys = all.v;
    size_t nkeys = all.n;
    if (nkeys) qsort(keys, nkeys, sizeof(*keys), keyCompare);
    for (size_t i = 0; i < nkeys; i++) {
        if (i && keyCompare(&keys[i - 1], &keys[i]) == 0) continue;
        long long size = mc_size(c, keys[i].name, keys[i].len);
        if (size == MC_ERR_NOT_FOUND) continue;    /* removed since the SCAN */
        if (size < 0 && size != MC_ERR_NOT_READY) {
            fflush(stdout);
            mcFail(c, (int)size, "ls: size of %.*s", (int)keys[i].len, keys[i].name);
            goto err;
        }
        fwrite(keys[i].name, 1, keys[i].len, stdout);
        if (size < 0) printf("\tpending\n");
        else printf("\t%lld\n", size);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        sysFail("ls: write stdout");
        goto err;
    }
    ret = 0;

err:
    for (size_t i = 0; i < all.n; i++) free(all.v[i].name);
    free(all.v);
    mcConnClose(conn);
    return ret;
}

static int rmCommand(mc_client *c, int argc, char **argv) {
    long long removed = 0;
    for (int i = 0; i < argc; i++) {
        int rc = mc_remove(c, argv[i], strlen(argv[i]));
        if (rc < 0) return mcFail(c, rc, "rm %s", argv[i]);
        removed += rc;
    }
    printf("%lld\n", removed);
    if (fflush(stdout) != 0) return sysFail("rm: write stdout");
    return 0;
}

/* The command table: name, handler, and how many arguments it takes. */
typedef struct cliCommand {
    const char *name;
    int (*proc)(mc_client *c, int argc, char **argv);
    int minargs, maxargs;       /* maxargs -1: any number */
    const char *synopsis;
} cliCommand;

static const cliCommand commands[] = {
    {"put", putCommand, 2, 2, "put <key> <file>"},
    {"get", getCommand, 2, 2, "get <key> <file>"},
    {"ls", lsCommand, 0, 1, "ls [pattern]"},
    {"rm", rmCommand, 1, -1, "rm <key>..."},
};

/* ---- main ---------------------------------------------------------------- */

static int argInt(const char *opt, const char *v, int min, int max) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max)
        usageError("invalid value for %s: '%s' (expected %d..%d)", opt, v, min, max);
    return (int)n;
}

/* Options may come anywhere (before or after the command). What is not an
 * option is moved to the front, to argv[1..n] in order, as getopt permutes
 * (argv[i] is read before any slot at or after it is written), and n is
 * returned: no allocation, so no exit path has anything to free. */
static int parseArgs(int argc, char **argv, int *put_opts) {
    int npos = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (only_pos || o[0] != '-' || !strcmp(o, "-")) {
            argv[1 + npos++] = argv[i];
            continue;
        }
        if (!strcmp(o, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(o, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(o, "-v") || !strcmp(o, "--version")) {
            printf(CLI_NAME " %s\n", mc_version());
            exit(0);
        }
        if (!strcmp(o, "--replace")) {
            config.replace = 1;
            (*put_opts)++;
            continue;
        }
        int known = !strcmp(o, "-h") || !strcmp(o, "-p") || !strcmp(o, "-s") || !strcmp(o, "-a") ||
                    !strcmp(o, "--user") || !strcmp(o, "--transport") || !strcmp(o, "--replicas") ||
                    !strcmp(o, "--connect-retry");
        if (!known) usageError("unknown option %s", o);
        if (i == argc - 1) usageError("option %s needs a value", o);
        const char *v = argv[++i];
        if (!strcmp(o, "-h")) config.host = v;
        else if (!strcmp(o, "-p")) config.port = argInt(o, v, 1, 65535);
        else if (!strcmp(o, "-s")) config.sock = v;
        else if (!strcmp(o, "-a")) config.password = v;
        else if (!strcmp(o, "--user")) config.user = v;
        else if (!strcmp(o, "--connect-retry")) config.connect_retry_ms = argInt(o, v, 0, 3600000);
        else if (!strcmp(o, "--replicas")) {
            config.replicas = argInt(o, v, 1, 8);
            (*put_opts)++;
        } else if (!strcasecmp(v, "auto")) config.transport = MC_TRANSPORT_AUTO;
        else if (!strcasecmp(v, "shm")) config.transport = MC_TRANSPORT_SHM;
        else if (!strcasecmp(v, "tcp")) config.transport = MC_TRANSPORT_TCP;
        else usageError("invalid value for --transport: '%s' (auto, shm or tcp)", v);
    }
    return npos;
}

/* The first connect, tried again with backoff while the connection itself
 * fails (libmooncake's "connect <uri>: <strerror>"), for at most
 * connect_retry_ms in all (see the top comment). */
static mc_client *connectRetrying(char *err, size_t errlen) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long delay = 50;
    for (;;) {
        mc_client *c = mc_connect_user(config.uri, config.user, config.password, err, errlen);
        if (c || strncmp(err, "connect ", 8)) return c;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (long)((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        long left = config.connect_retry_ms - elapsed;
        if (left <= 0) return NULL;
        long wait = delay < left ? delay : left;
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
}

int main(int argc, char **argv) {
    mc_client *c = NULL;
    int ret = 1, put_opts = 0;
    /* A closed stdout or a dead server must be an error we report, not a
     * silent death by signal. */
    signal(SIGPIPE, SIG_IGN);

    int npos = parseArgs(argc, argv, &put_opts);
    char **pos = argv + 1;
    if (npos == 0) usageError("no command given");
    const cliCommand *cmd = NULL;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(pos[0], commands[i].name)) cmd = &commands[i];
    int nargs = npos - 1;
    const char *bad = NULL;
    if (cmd == NULL) bad = "unknown command";
    else if (nargs < cmd->minargs || (cmd->maxargs >= 0 && nargs > cmd->maxargs)) bad = "wrong number of arguments";
    else if (put_opts && cmd->proc != putCommand) bad = "--replace and --replicas only apply to put";
    if (bad) {
        if (cmd) usageError("%s: %s (usage: %s)", pos[0], bad, cmd->synopsis);
        usageError("%s: %s", pos[0], bad);
    }

    if (config.sock) {
        snprintf(config.uri, sizeof(config.uri), "unix://%s", config.sock);
    } else {
        /* An IPv6 literal needs brackets to keep its colons from the port's. */
        int v6 = strchr(config.host, ':') != NULL;
        snprintf(config.uri, sizeof(config.uri), "tcp://%s%s%s:%d", v6 ? "[" : "", config.host, v6 ? "]" : "",
                 config.port);
    }
    char err[512];
    c = connectRetrying(err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, CLI_NAME ": %s: %s\n", cmd->name, err);
        goto err;
    }
    mc_set_transport(c, config.transport);
    ret = cmd->proc(c, nargs, pos + 1);

err:
    mc_close(c);
    return ret;
}
