/* test_rdma.c -- unit tests for the RDMA transport's device-free parts.
 *
 * Descriptors, NIC ordering and the striping plan decide where every byte
 * of an RDMA transfer goes, and they are the parts a machine without RDMA
 * hardware can check, so they are tested exhaustively here: every rejection
 * of the parser, round trips through the RKEY text, and the striping
 * invariants (no gap, no overlap, no slice over the chunk, NIC shares within
 * one chunk of each other) over a table of awkward sizes.
 *
 * The engine is only checked for failing cleanly: without a device (or
 * without MC_HAVE_RDMA) mcRdmaOpen must return NULL and say why. When a
 * device exists (a real one, or libfakeverbs.so named by MC_VERBS_LIBRARY),
 * a loopback WRITE/READ through two engines in this process is run as well,
 * its QPs exchanged over MC_RDMA_TEST_HOST (default 127.0.0.1); otherwise
 * that test prints a SKIP line with the reason and is not counted. The
 * transport end to end between processes is test_mooncake_rdma.c. */
#include "mc_rdma.h"
#include "mooncake.h"
#include "testhelp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* Parses and expects a refusal with a reason. */
static int rejects(const char *endpoint, const char *rkeys) {
    mcRdmaDesc d;
    char err[256] = "";
    if (mcRdmaDescParse(&d, endpoint, 0, rkeys, err, sizeof(err)) == 0) {
        fprintf(stderr, "  accepted: endpoint '%s' rkeys '%s'\n", endpoint ? endpoint : "(null)",
                rkeys ? rkeys : "(null)");
        return 0;
    }
    if (err[0] == '\0') {
        fprintf(stderr, "  refused without a reason: '%s' '%s'\n", endpoint, rkeys);
        return 0;
    }
    return d.nkeys == 0 && d.host[0] == '\0';
}

/* Formats d's keys, parses them back and compares. */
static int roundTrip(const mcRdmaDesc *d) {
    mcRdmaDesc e;
    char keys[2048], ep[300], err[256];
    if (mcRdmaDescFormatKeys(d, keys, sizeof(keys)) < 0) return 0;
    snprintf(ep, sizeof(ep), strchr(d->host, ':') ? "rdma://[%s]:%d" : "rdma://%s:%d", d->host,
             d->port);
    if (mcRdmaDescParse(&e, ep, d->base, keys, err, sizeof(err)) != 0) {
        fprintf(stderr, "  round trip of '%s' '%s': %s\n", ep, keys, err);
        return 0;
    }
    return memcmp(d, &e, sizeof(e)) == 0;
}

static mcRdmaNic nic(const char *name, int numa, int active) {
    mcRdmaNic n;
    memset(&n, 0, sizeof(n));
    snprintf(n.name, sizeof(n.name), "%s", name);
    n.numa_node = numa;
    n.port = 1;
    n.active = active;
    return n;
}

/* Every striping invariant for one plan; prints the case that breaks. */
static int stripeOk(uint64_t len, int nnics, uint64_t chunk) {
    static mcRdmaSlice sl[70000];
    uint64_t share[MC_RDMA_MAX_NICS] = {0}, off = 0, lo = UINT64_MAX, hi = 0;
    uint64_t eff = chunk ? chunk : MiB;
    int n = mcRdmaStripe(len, nnics, chunk, sl, (int)(sizeof(sl) / sizeof(sl[0])));

    if (n < 0 || (len == 0) != (n == 0)) goto bad;
    for (int i = 0; i < n; i++) {
        if (sl[i].offset != off || sl[i].len == 0 || sl[i].len > eff) goto bad;
        if (sl[i].nic != i % nnics) goto bad; /* round robin */
        share[sl[i].nic] += sl[i].len;
        off += sl[i].len;
    }
    if (off != len) goto bad;
    for (int k = 0; k < nnics; k++) { /* a NIC with no slice counts as a share of 0 */
        if (share[k] < lo) lo = share[k];
        if (share[k] > hi) hi = share[k];
    }
    if (hi - lo > eff) goto bad;
    return 1;
bad:
    fprintf(stderr, "  stripe len=%llu nnics=%d chunk=%llu: %d slices, bad plan\n",
            (unsigned long long)len, nnics, (unsigned long long)chunk, n);
    return 0;
}

int main(void) {
    TEST("rdma desc: IPv4 endpoint with per-NIC rkeys") {
        mcRdmaDesc d;
        char err[256], keys[256];
        CHECK(mcRdmaDescParse(&d, "rdma://10.0.0.7:18515", 0x7f0000001000ULL,
                              "mlx5_0:1a2b,mlx5_1:3C4D", err, sizeof(err)) == 0);
        CHECK(strcmp(d.host, "10.0.0.7") == 0);
        CHECK_EQ(d.port, 18515);
        CHECK(d.base == 0x7f0000001000ULL);
        CHECK_EQ(d.nkeys, 2);
        CHECK(strcmp(d.nic[0], "mlx5_0") == 0 && d.rkey[0] == 0x1a2b);
        CHECK(strcmp(d.nic[1], "mlx5_1") == 0 && d.rkey[1] == 0x3c4d);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, keys, sizeof(keys)), 23);
        CHECK(strcmp(keys, "mlx5_0:1a2b,mlx5_1:3c4d") == 0);
        CHECK(roundTrip(&d));
    }

    TEST("rdma desc: IPv6 in brackets, host names, bare rkey") {
        mcRdmaDesc d;
        char err[256], keys[64];
        CHECK(mcRdmaDescParse(&d, "rdma://[fe80::1%eth0]:4791", 0, "deadbeef", err,
                              sizeof(err)) == 0);
        CHECK(strcmp(d.host, "fe80::1%eth0") == 0);
        CHECK_EQ(d.port, 4791);
        CHECK_EQ(d.nkeys, 1);
        CHECK(d.nic[0][0] == '\0' && d.rkey[0] == 0xdeadbeefu);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, keys, sizeof(keys)), 8);
        CHECK(strcmp(keys, "deadbeef") == 0);
        CHECK(roundTrip(&d));
        CHECK(mcRdmaDescParse(&d, "rdma://[::1]:1", 0, "0x1F", err, sizeof(err)) == 0);
        CHECK(strcmp(d.host, "::1") == 0 && d.port == 1 && d.rkey[0] == 0x1f);
        CHECK(mcRdmaDescParse(&d, "rdma://node-7.cluster.local:65535", 5, "FFFFFFFF", err,
                              sizeof(err)) == 0);
        CHECK(strcmp(d.host, "node-7.cluster.local") == 0 && d.port == 65535);
        CHECK(d.base == 5 && d.rkey[0] == 0xffffffffu);
        CHECK(roundTrip(&d));
    }

    TEST("rdma desc: sixteen NICs round trip, a seventeenth is refused") {
        mcRdmaDesc d;
        char keys[2048], err[256];
        size_t used = 0;
        memset(&d, 0, sizeof(d));
        snprintf(d.host, sizeof(d.host), "192.168.1.2");
        d.port = 7000;
        d.base = UINT64_MAX - 4096;
        for (int i = 0; i < MC_RDMA_MAX_NICS; i++) {
            snprintf(d.nic[i], sizeof(d.nic[i]), "mlx5_%d", i);
            d.rkey[i] = i ? 0xffffffffu / (uint32_t)i : 0;
        }
        d.nkeys = MC_RDMA_MAX_NICS;
        CHECK(roundTrip(&d));
        for (int i = 0; i <= MC_RDMA_MAX_NICS; i++)
            used += (size_t)snprintf(keys + used, sizeof(keys) - used, "%snic%d:%x",
                                     i ? "," : "", i, i + 1);
        CHECK(rejects("rdma://h:1", keys));
        *strrchr(keys, ',') = '\0'; /* back to sixteen */
        CHECK(mcRdmaDescParse(&d, "rdma://h:1", 0, keys, err, sizeof(err)) == 0);
        CHECK_EQ(d.nkeys, MC_RDMA_MAX_NICS);
    }

    TEST("rdma desc: every malformed endpoint is refused with a reason") {
        CHECK(rejects(NULL, "1"));
        CHECK(rejects("", "1"));
        CHECK(rejects("tcp://10.0.0.1:5000", "1"));
        CHECK(rejects("rdma:/10.0.0.1:5000", "1"));
        CHECK(rejects("RDMA://10.0.0.1:5000", "1"));
        CHECK(rejects("rdma://10.0.0.1", "1"));      /* no port */
        CHECK(rejects("rdma://10.0.0.1:", "1"));     /* empty port */
        CHECK(rejects("rdma://:5000", "1"));         /* empty host */
        CHECK(rejects("rdma://", "1"));
        CHECK(rejects("rdma://[]:5000", "1"));
        CHECK(rejects("rdma://[::1:5000", "1"));     /* unterminated bracket */
        CHECK(rejects("rdma://[::1]5000", "1"));
        CHECK(rejects("rdma://[::1]", "1"));
        CHECK(rejects("rdma://fe80::1:5000", "1"));  /* IPv6 without brackets */
        mcRdmaDesc d;
        char err[256] = "";
        CHECK(mcRdmaDescParse(&d, "rdma://fe80::1:5000", 0, "1", err, sizeof(err)) != 0);
        CHECK(strstr(err, "bracket") != NULL); /* the reason says what to do */
        CHECK(rejects("rdma://h:0", "1"));
        CHECK(rejects("rdma://h:65536", "1"));
        CHECK(rejects("rdma://h:99999999999999999999999", "1"));
        CHECK(rejects("rdma://h:-1", "1"));
        CHECK(rejects("rdma://h:12ab", "1"));
        CHECK(rejects("rdma://h:5000/path", "1"));
        CHECK(rejects("rdma://h:5000 ", "1"));
        char longhost[400];
        memset(longhost, 'a', sizeof(longhost));
        memcpy(longhost, "rdma://", 7);
        snprintf(longhost + 7 + 260, sizeof(longhost) - 267, ":5000");
        CHECK(rejects(longhost, "1"));
    }

    TEST("rdma desc: every malformed rkey text is refused with a reason") {
        const char *ep = "rdma://10.0.0.1:5000";
        char longnic[100];
        CHECK(rejects(ep, NULL));
        CHECK(rejects(ep, ""));
        CHECK(rejects(ep, "xyz"));
        CHECK(rejects(ep, "0x"));
        CHECK(rejects(ep, "123456789"));  /* over 32 bits */
        CHECK(rejects(ep, "-1"));
        CHECK(rejects(ep, "1a 2b"));
        CHECK(rejects(ep, "mlx5_0:"));
        CHECK(rejects(ep, ":1a"));
        CHECK(rejects(ep, "mlx5_0:zz"));
        CHECK(rejects(ep, "mlx5_0:1a,"));
        CHECK(rejects(ep, ",mlx5_0:1a"));
        CHECK(rejects(ep, "mlx5_0:1a,,mlx5_1:2b"));
        CHECK(rejects(ep, "mlx5_0:1a,2b"));  /* bare key among named ones */
        CHECK(rejects(ep, "mlx5_0:1:2"));
        CHECK(rejects(ep, "mlx5_0:1a,mlx5_0:2b"));  /* the same NIC twice */
        memset(longnic, 'n', 64);
        snprintf(longnic + 64, sizeof(longnic) - 64, ":1");
        CHECK(rejects(ep, longnic));
        longnic[63] = ':'; /* 63 chars of name fit */
        longnic[64] = '1';
        longnic[65] = '\0';
        mcRdmaDesc d;
        char err[256];
        CHECK(mcRdmaDescParse(&d, ep, 0, longnic, err, sizeof(err)) == 0);
    }

    TEST("rdma desc: formatting refuses a short buffer") {
        mcRdmaDesc d;
        char err[256], buf[64];
        CHECK(mcRdmaDescParse(&d, "rdma://h:1", 0, "a:1,b:22", err, sizeof(err)) == 0);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, buf, 9), 8);  /* exact fit with the NUL */
        CHECK(strcmp(buf, "a:1,b:22") == 0);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, buf, 8), -1);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, buf, 2), -1);
        CHECK_EQ(mcRdmaDescFormatKeys(&d, buf, 0), -1);
    }

    TEST("rdma nics: active first, then same NUMA node, then by name") {
        mcRdmaNic nics[6] = {
            nic("mlx5_3", 1, 1), nic("mlx5_0", 0, 0), nic("mlx5_2", 0, 1),
            nic("mlx5_1", 1, 1), nic("mlx5_4", 0, 1), nic("mlx5_5", -1, 1),
        };
        int order[6];
        CHECK_EQ(mcRdmaOrderNics(nics, 6, 0, order), 5);
        /* node 0 and active: mlx5_2, mlx5_4; then others by name; inactive last */
        const char *want0[6] = {"mlx5_2", "mlx5_4", "mlx5_1", "mlx5_3", "mlx5_5", "mlx5_0"};
        for (int i = 0; i < 6; i++) CHECK(strcmp(nics[order[i]].name, want0[i]) == 0);
        CHECK_EQ(mcRdmaOrderNics(nics, 6, 1, order), 5);
        const char *want1[6] = {"mlx5_1", "mlx5_3", "mlx5_2", "mlx5_4", "mlx5_5", "mlx5_0"};
        for (int i = 0; i < 6; i++) CHECK(strcmp(nics[order[i]].name, want1[i]) == 0);
        CHECK_EQ(mcRdmaOrderNics(nics, 6, -1, order), 5);  /* unknown node: by name */
        const char *want2[6] = {"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_0"};
        for (int i = 0; i < 6; i++) CHECK(strcmp(nics[order[i]].name, want2[i]) == 0);
    }

    TEST("rdma nics: inactive excluded, none usable, equal names keep order") {
        mcRdmaNic nics[3] = {nic("b", 0, 0), nic("a", 0, 0), nic("c", 0, 0)};
        int order[3];
        CHECK_EQ(mcRdmaOrderNics(nics, 3, 0, order), 0);
        CHECK_EQ(mcRdmaOrderNics(nics, 0, 0, order), 0);
        nics[2].active = 1;
        CHECK_EQ(mcRdmaOrderNics(nics, 3, 0, order), 1);
        CHECK_EQ(order[0], 2);
        mcRdmaNic same[3] = {nic("x", 0, 1), nic("x", 0, 1), nic("x", 0, 1)};
        CHECK_EQ(mcRdmaOrderNics(same, 3, 0, order), 3);
        CHECK(order[0] == 0 && order[1] == 1 && order[2] == 2);
    }

    TEST("rdma stripe: coverage, chunk bound, balance over awkward sizes") {
        const uint64_t lens[] = {1, 2, 3, 4095, 4096, 64 * KiB - 1, 64 * KiB, 100 * KiB,
                                 MiB - 1, MiB, MiB + 1, 3 * MiB + 7, 16 * MiB, 63 * MiB + 12345,
                                 GiB + 1};
        const int nn[] = {1, 2, 3, 4, 7, 8, 16};
        const uint64_t chunks[] = {0, 1, 4096, 1000003, MiB, 4 * MiB};
        for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++)
            for (size_t b = 0; b < sizeof(nn) / sizeof(nn[0]); b++)
                for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
                    if (chunks[c] && lens[a] / chunks[c] > 60000) continue; /* too many slices */
                    CHECK(stripeOk(lens[a], nn[b], chunks[c]));
                }
    }

    TEST("rdma stripe: defaults, spreading and edge cases") {
        mcRdmaSlice sl[64];
        CHECK_EQ(mcRdmaStripe(0, 4, MiB, sl, 64), 0);
        CHECK_EQ(mcRdmaStripe(0, 4, MiB, sl, 0), 0);
        CHECK_EQ(mcRdmaStripe(MiB, 0, MiB, sl, 64), -1);
        CHECK_EQ(mcRdmaStripe(MiB, -3, MiB, sl, 64), -1);
        CHECK_EQ(mcRdmaStripe(10 * MiB, 2, 0, sl, 64), 10);  /* chunk 0 is 1 MiB */
        for (int i = 0; i < 10; i++) CHECK(sl[i].len == MiB && sl[i].nic == i % 2);
        CHECK_EQ(mcRdmaStripe(10 * MiB, 2, 0, sl, 9), -1);   /* cap too small */
        CHECK_EQ(mcRdmaStripe(10 * MiB, 2, 0, sl, 10), 10);  /* exact cap */
        CHECK_EQ(mcRdmaStripe(4096, 4, 4 * MiB, sl, 64), 1); /* small: one NIC */
        CHECK(sl[0].offset == 0 && sl[0].len == 4096 && sl[0].nic == 0);
        CHECK_EQ(mcRdmaStripe(MiB, 4, 4 * MiB, sl, 64), 4);  /* large enough: every NIC */
        for (int i = 0; i < 4; i++) CHECK(sl[i].len == MiB / 4 && sl[i].nic == i);
        CHECK_EQ(mcRdmaStripe(MiB, 4, 4 * MiB, sl, 3), -1);
        CHECK_EQ(mcRdmaStripe(UINT64_MAX, 1, 1, sl, 64), -1); /* no overflow, just -1 */
        CHECK_EQ(mcRdmaStripe(UINT64_MAX, 3, 0, sl, 64), -1);
    }

    TEST("rdma engine: open fails cleanly without a device") {
        char err[256] = "";
        mcRdma *r = mcRdmaOpen(err, sizeof(err));
#ifdef MC_HAVE_RDMA
        if (r) {
            printf("NOTE: an RDMA device is present; the no-device check does not apply\n");
            mcRdmaClose(r);
        } else {
            printf("  mcRdmaOpen: %s\n", err);
            CHECK(err[0] != '\0');
        }
#else
        CHECK(r == NULL);
        CHECK(strstr(err, "BUILD_RDMA=no") != NULL);
        int port = 0;
        char buf[64];
        mcRdmaDesc d;
        memset(&d, 0, sizeof(d));
        CHECK_EQ(mcRdmaRegister(NULL, buf, sizeof(buf), NULL, 0), MC_ERR_UNSUPPORTED);
        CHECK_EQ(mcRdmaUnregister(NULL, buf), MC_ERR_UNSUPPORTED);
        CHECK_EQ(mcRdmaListen(NULL, NULL, &port, err, sizeof(err)), MC_ERR_UNSUPPORTED);
        CHECK_EQ(mcRdmaTransfer(NULL, &d, 0, buf, 1, 1, err, sizeof(err)), MC_ERR_UNSUPPORTED);
        mcRdmaClose(NULL);
#endif
    }

    /* A real transfer needs hardware: not a TEST unless it can run, so a
     * machine without RDMA shows a SKIP instead of a pass. */
    {
        char err[256] = "";
        mcRdma *host = mcRdmaOpen(err, sizeof(err)), *peer = NULL;
        /* QPs are exchanged over TCP and addressed by GID/LID, so any
         * address the listener can bind carries the exchange. */
        const char *ip = getenv("MC_RDMA_TEST_HOST") ? getenv("MC_RDMA_TEST_HOST") : "127.0.0.1";
        if (host == NULL) {
            printf("SKIP: rdma loopback transfer: no RDMA device usable (mcRdmaOpen: %s)\n", err);
        } else if ((peer = mcRdmaOpen(err, sizeof(err))) != NULL) {
            TEST("rdma engine: loopback WRITE then READ through two engines") {
                size_t len = 9 * MiB + 123;
                char *seg = calloc(1, len), *src = malloc(len), *dst = calloc(1, len);
                char rkeys[1024], ep[300];
                int port = 0;
                mcRdmaDesc d;
                for (size_t i = 0; i < len; i++) src[i] = (char)(i * 131 + 7);
                CHECK_EQ(mcRdmaRegister(host, seg, len, rkeys, sizeof(rkeys)), MC_OK);
                CHECK_EQ(mcRdmaListen(host, ip, &port, err, sizeof(err)), MC_OK);
                CHECK_EQ(mcRdmaRegister(peer, src, len, NULL, 0), MC_OK);
                CHECK_EQ(mcRdmaRegister(peer, dst, len, NULL, 0), MC_OK);
                snprintf(ep, sizeof(ep), strchr(ip, ':') ? "rdma://[%s]:%d" : "rdma://%s:%d",
                         ip, port);
                CHECK(mcRdmaDescParse(&d, ep, (uint64_t)(uintptr_t)seg, rkeys, err,
                                      sizeof(err)) == 0);
                CHECK_EQ(mcRdmaTransfer(peer, &d, 0, src, len, 1, err, sizeof(err)), MC_OK);
                CHECK(memcmp(seg, src, len) == 0);
                CHECK_EQ(mcRdmaTransfer(peer, &d, 0, dst, len, 0, err, sizeof(err)), MC_OK);
                CHECK(memcmp(dst, src, len) == 0);
                CHECK_EQ(mcRdmaTransfer(peer, &d, 0, seg, 1, 0, err, sizeof(err)),
                         MC_ERR_INVALID); /* not registered on this engine */
                if (test_cur_failed) fprintf(stderr, "  last error: %s\n", err);
                mcRdmaClose(peer);
                mcRdmaClose(host);
                host = NULL;
                free(seg);
                free(src);
                free(dst);
            }
        } else {
            printf("SKIP: rdma loopback transfer: second engine: %s\n", err);
        }
        mcRdmaClose(host);
    }
    return testReport();
}
