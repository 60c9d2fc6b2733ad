/* test_mooncake.c -- libmooncake (src/libmooncake/mooncake.h) against real
 * servers: the group table and main() of test_mooncake.
 *
 * Every group starts a mooncake-server of its own (testserver.h) with the
 * settings it needs, listening on a free TCP port and on a unix socket, and
 * drives it through the library, through hiredis, and through raw sockets
 * where a misbehaving peer is the point. The groups live in one file per
 * part of the library, so that the tests of a part are found in one place
 * (each file's comment says what it covers and why):
 *
 *   test_mooncake_basic.c      round trips, error codes, replica fallback,
 *                              lease expiry and release, plain Redis clients
 *   test_mooncake_hosted.c     a segment a client hosts: puts into it, its
 *                              heartbeat, the tokens that admit its peers
 *   test_mooncake_transport.c  parallel tcp streams, the shm pool mapped once
 *   test_mooncake_threads.c    threads sharing keys, a writer killed mid-put
 *   test_mooncake_security.c   requirepass, forged data-plane requests, ACL
 *   test_mooncake_batch.c      batches, exists, scatter-gather, ranged reads
 *   test_mooncake_async.c      non-blocking batches (mc_async.c)
 *   test_mooncake_device.c     device memory, against the fake CUDA runtime
 *   test_mooncake_fork.c       handles inherited across fork(): the child
 *                              never touches what the parent holds
 *   test_mooncake_stress.c     one handle shared by 12 threads; per-thread
 *                              error texts; mc_close under calls in flight
 *
 * test_mooncake.h holds what these files share (the connect, put, get and
 * compare helpers, the helper process that hosts a segment, the groups'
 * declarations); mctest.h what they also share with test_mooncake_cluster.c
 * (byte patterns, value checks). All count into one set of TEST counters,
 * defined here (TEST_SHARED_STATE).
 *
 * Values are pseudo-random (xorshift64*) from a seed derived from the key
 * and size, so every key holds different bytes and a value read from the
 * wrong place cannot pass. Each group runs under an alarm() watchdog that
 * kills the servers and reports the hung test; the whole program takes a
 * few seconds.
 *
 * Usage: test_mooncake [group-substring]   (the server binary: see
 * testserver.h; MC_SERVER overrides it). Without an argument it runs every
 * group. The CUDA runtime libmooncake loads is MC_CUDA_LIBRARY, set here to
 * build/tests/libfakecuda.so beside the program when it is not set (the
 * device group; MC_CUDA_LIBRARY=libcudart.so.13 runs it on a real GPU).
 * The program re-executes itself as `test_mooncake --host-child ...` for
 * the helper process that hosts a segment (test_mooncake.h): a fresh exec
 * rather than a bare fork, because the parent may already run library
 * threads.
 */
#include "test_mooncake.h"

/* The state every file of the program shares (testhelp.h, testserver.h). */
int test_passed, test_failed, test_cur_failed;
const char *test_cur_name;
volatile pid_t ts_tracked[TS_MAX_TRACKED];

/* ---- signals ------------------------------------------------------------------ */

static volatile sig_atomic_t sigpipes;

static void onSigpipe(int sig) {
    (void)sig;
    sigpipes++;
}

/* ==== main ============================================================================================ */

static const struct {
    const char *name;
    void (*fn)(void);
} groups[] = {
    {"round-trips", testRoundTrips}, {"errors", testErrors},     {"hosted", testHostedSegment},
    {"fallback", testReplicaFallback}, {"lease", testLeaseExpiry}, {"threads", testConcurrency},
    {"abandoned", testAbandonedPut},   {"auth", testAuth},         {"forged", testForged},
    {"interop", testInterop},          {"batch", testBatch},        {"streams", testStreams},
    {"keepalive", testKeepalive},      {"first-touch", testFirstTouch},
    {"lease-release", testLeaseRelease}, {"acl", testAcl},             {"exists", testExists},
    {"reply-parser", testReplyParser},
    {"scatter-gather", testScatterGather}, {"async", testAsync},   {"ranges", testRanges},
    {"device", testDevice},            {"host-tokens", testHostTokens}, {"ride", testRide},
    {"views", testViews},              {"fork", testFork},         {"stress", testStress},
};

/* MC_CUDA_LIBRARY, unless set: the fake runtime beside this program. Its
 * asynchronous copies are deferred to their stream's synchronisation
 * (FAKECUDA_ASYNC=1, unless set), so the tcp pipeline's order is checked
 * too: synchronous, a pipeline that sent a slot before its copy finished
 * would pass here and send stale bytes on a GPU. */
static void defaultCudaLibrary(void) {
    const char *set = getenv("MC_CUDA_LIBRARY");
    char self[4096], lib[4200];
    setenv("FAKECUDA_ASYNC", "1", 0);
    if (set && set[0]) return;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(lib, sizeof(lib), "%s/libfakecuda.so", self);
    setenv("MC_CUDA_LIBRARY", lib, 1);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--host-child")) return hostChildMain(argc, argv);
    defaultCudaLibrary();
    const char *only = groupMainStart("test_mooncake", MC_VERSION, onSigpipe, argc, argv);
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (only == NULL || strstr(groups[i].name, only) != NULL) groups[i].fn();
    alarm(0);
    TEST("no SIGPIPE reached the process (the library must not raise it)") CHECK_EQ(sigpipes, 0);
    return testReport();
}
