/* fuzz_config.c -- libFuzzer target for the server's own text parsers that
 * are not RESP: the configuration file (src/config.c), CONFIG SET's values,
 * ACL SETUSER's rules and the ACL file (src/acl.c).
 *
 * A config file or ACL file is whatever sits on disk, and CONFIG SET and
 * ACL SETUSER take any bytes a client with the right to run them sends.
 * Beyond memory safety, what matters is that what the server writes back
 * out reads back as the same thing: CONFIG REWRITE writes each directive as
 * formatConfigLine makes it, a CONFIG SET that fails restores the old
 * values from their CONFIG GET text, and ACL SAVE / ACL LIST write each
 * user as describeUser makes it. A value that does not survive that trip
 * is a config that changes, or a server that will not start, after a
 * rewrite.
 *
 * config.c and acl.c are included whole so that their static parsers are
 * reachable; the rest of the server is linked as it is (server.c's main
 * renamed to mooncakeServerMain). Set up once by main itself: its
 * --version runs the start-up (the command table, the ACL users, the
 * defaults) and returns. The first input byte picks the mode:
 *
 *   0  the rest is a config file (loadConfigFromString)
 *   1  CONFIG SET: byte 1 picks the directive, the rest is its value
 *   2  ACL SETUSER: the rest is the user name and its rules, one per line
 *   3  the rest is an ACL file (parseAclFile, read through a memfd)
 *
 * Checked after each: every directive's file line loads back to the same
 * CONFIG GET value, and so does its CONFIG GET value through CONFIG SET's
 * restore path; every user an ACL mode accepted describes itself as a line
 * that, read as an ACL file line, gives the same description. Every value
 * is reset to its default after each input. A broken invariant is
 * FUZZ_CHECK's __builtin_trap(), which libFuzzer reports with the input
 * saved.
 */
#include "../../src/config.c"

#include "../../src/acl.c"

#include <fcntl.h>
#include <sys/mman.h>

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) __builtin_trap(); \
    } while (0)

/* Says which directive or user broke the invariant before the trap. */
#define TRIP_CHECK(cond, what, a, b) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "round trip broken for %s: '%s' became '%s'\n", what, a, b); \
            __builtin_trap(); \
        } \
    } while (0)

static int ncfg;
static int cwdfd = -1;

int mooncakeServerMain(int argc, char **argv);

/* main's own start-up (the command table, the users, the defaults), which
 * --version runs before it prints the version and returns. */
static void setUp(void) {
    char *argv[] = {"mooncake-server", "--version", NULL};
    mooncakeServerMain(2, argv);
    while (configs[ncfg].name) ncfg++;
    cwdfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Whether directive c's value survives the two trips back (see the top). */
static void checkRoundTrip(standardConfig *c) {
    if (!strcmp(c->name, "dir")) return; /* the cwd, not a value held */
    sds before = getConfigValue(c);
    /* CONFIG REWRITE's line, loaded as a file. */
    sds line = formatConfigLine(c);
    char err[1024];
    TRIP_CHECK(loadConfigFromString(line, "rewrite", err, sizeof(err)) == C_OK, c->name, line, err);
    sds after = getConfigValue(c);
    TRIP_CHECK(sdslen(before) == sdslen(after) && !memcmp(before, after, sdslen(after)), c->name, before, after);
    sdsfree(after);
    sdsfree(line);
    /* CONFIG SET's restore of the old value from its CONFIG GET text. */
    int argc;
    const char *why = NULL;
    sds *argv = splitValue(c, before, &argc);
    FUZZ_CHECK(argv != NULL);
    TRIP_CHECK(setConfigValue(c, argv, argc, &why) == C_OK, c->name, before, why);
    sdsfreesplitres(argv, argc);
    after = getConfigValue(c);
    TRIP_CHECK(sdslen(before) == sdslen(after) && !memcmp(before, after, sdslen(after)), c->name, before, after);
    sdsfree(after);
    sdsfree(before);
}

/* describeUser's line, read back as the ACL file reads a line, must give
 * a user that describes itself the same way. */
static void checkUserRoundTrip(const user *u) {
    sds desc = describeUser(sdsempty(), u);
    int argc;
    sds *argv = sdssplitargs(desc, &argc);
    TRIP_CHECK(argv != NULL && argc >= 2 && !strcmp(argv[0], "user"), "a user", desc, "(not a user line)");
    FUZZ_CHECK(validUserName(argv[1], sdslen(argv[1])));
    FUZZ_CHECK(sdslen(argv[1]) == sdslen(u->name) && !memcmp(argv[1], u->name, sdslen(u->name)));
    user *v = userNew(argv[1], sdslen(argv[1]));
    int errop;
    const char *why;
    FUZZ_CHECK(applyRules(v, argv + 2, argc - 2, &errop, &why) == C_OK);
    sds again = describeUser(sdsempty(), v);
    TRIP_CHECK(sdslen(again) == sdslen(desc) && !memcmp(again, desc, sdslen(desc)), "a user", desc, again);
    FUZZ_CHECK(!memcmp(v->allowed, u->allowed, sizeof(uint64_t) * (size_t)BITMAP_WORDS));
    sdsfree(again);
    userFree(v);
    sdsfreesplitres(argv, argc);
    sdsfree(desc);
}

static void fuzzConfigFile(const uint8_t *data, size_t size) {
    sds text = sdsnewlen(data, size);
    char err[1024];
    loadConfigFromString(text, "fuzz", err, sizeof(err));
    sdsfree(text);
    for (int i = 0; i < ncfg; i++) checkRoundTrip(&configs[i]);
}

static void fuzzConfigSet(const uint8_t *data, size_t size) {
    if (size < 1) return;
    standardConfig *c = &configs[data[0] % ncfg];
    if (!strcmp(c->name, "dir")) return;
    sds value = sdsnewlen(data + 1, size - 1);
    /* As configSetCommand: a zero byte only where the directive keeps bytes. */
    if ((c->flags & CFG_BINARY) || memchr(value, '\0', sdslen(value)) == NULL) {
        int argc;
        const char *why = NULL;
        sds *argv = splitValue(c, value, &argc);
        if (argv) {
            setConfigValue(c, argv, argc, &why);
            sdsfreesplitres(argv, argc);
        }
        checkRoundTrip(c);
    }
    sdsfree(value);
}

static void fuzzSetUser(const uint8_t *data, size_t size) {
    int n;
    sds *ops = sdssplitlen((const char *)data, (ssize_t)size, "\n", 1, &n);
    if (n >= 1 && validUserName(ops[0], sdslen(ops[0]))) {
        user *u = userNew(ops[0], sdslen(ops[0]));
        int errop;
        const char *why;
        if (applyRules(u, ops + 1, n - 1, &errop, &why) == C_OK) checkUserRoundTrip(u);
        userFree(u);
    }
    sdsfreesplitres(ops, n);
}

static void fuzzAclFile(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz-acl", MFD_CLOEXEC);
    if (fd == -1) return;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    user **users = NULL;
    int nusers = 0;
    sds err = NULL;
    if (parseAclFile(path, &users, &nusers, &err) == C_OK) {
        for (int i = 0; i < nusers; i++) {
            checkUserRoundTrip(users[i]);
            userFree(users[i]);
        }
        zfree(users);
    }
    sdsfree(err);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (ncfg == 0) setUp();
    if (size == 0) return 0;
    switch (data[0] % 4) {
    case 0: fuzzConfigFile(data + 1, size - 1); break;
    case 1: fuzzConfigSet(data + 1, size - 1); break;
    case 2: fuzzSetUser(data + 1, size - 1); break;
    case 3: fuzzAclFile(data + 1, size - 1); break;
    }
    /* Back to the defaults (and the directory: `dir` chdirs) for the next. */
    initConfigValues();
    if (cwdfd != -1 && fchdir(cwdfd) == -1) __builtin_trap();
    return 0;
}
