/* info.c -- INFO: the server's state as "field:value" lines by section.
 *
 * Field names follow Redis where the meaning is Redis's, because monitoring
 * tools and client libraries parse them (used_memory, connected_clients,
 * keyspace_hits, db0:keys=...). What Redis has no word for lives in the
 * `store` section: the pool, its allocator and eviction. `used_memory` is
 * the heap (keys and metadata) plus the pool's bytes in use (values), with
 * both parts reported on their own (used_memory_heap, used_memory_pool), so
 * the per-key overhead stays visible.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "owner.h"
#include "aof.h"
#include "cluster.h"
#include "replication.h"
#include "http.h"
#include "latency.h"
#include "pubsub.h"
#include "segment.h"
#include "server.h"
#include "tenantkeys.h"
#include "tenantquota.h"
#include "store.h"
#include "util.h"
#include "zerofree.h"
#include "zmalloc.h"

/* Error replies by their first word (ERR, WRONGTYPE, NOSPACE, ...), as
 * Redis's errorstats. A client can make up error words only through
 * commands that echo them, but the table is bounded anyway: past
 * ERRORSTATS_MAX words, new ones are counted together as OTHER. */
#define ERRORSTATS_MAX 128

static struct {
    char code[32];
    long long count;
} errorStats[ERRORSTATS_MAX];
static int nerrorStats;

/* instantaneous_ops_per_sec and _input_kbps / _output_kbps, as Redis:
 * the mean rate over the last INST_SAMPLES samples, one taken by the cron
 * every 100 ms or more (so 1.6 s at hz 10). Dashboards built for Redis
 * graph these rather than differentiate the totals themselves. */
#define INST_SAMPLES 16
#define INST_METRICS 3 /* commands, input bytes, output bytes */
static struct {
    long long last_ms;
    long long last[INST_METRICS];
    double samples[INST_METRICS][INST_SAMPLES];
    int idx;
} inst;

/* On the monotonic clock: a rate is per elapsed time, and on the wall
 * clock a step back stopped the sampling (every "now" was less than 100 ms
 * after the last) for the length of the step, the rates frozen. */
void statsSampleInstantaneous(void) {
    long long now = monoMs();
    if (inst.last_ms && now - inst.last_ms < 100) return;
    long long cur[INST_METRICS] = {server.stat_numcommands, server.stat_net_input_bytes,
                                   server.stat_net_output_bytes};
    if (inst.last_ms) {
        for (int m = 0; m < INST_METRICS; m++) {
            /* A CONFIG RESETSTAT between two samples: count from zero. */
            long long delta = cur[m] >= inst.last[m] ? cur[m] - inst.last[m] : cur[m];
            inst.samples[m][inst.idx] = (double)delta * 1000.0 / (double)(now - inst.last_ms);
        }
        inst.idx = (inst.idx + 1) % INST_SAMPLES;
    }
    inst.last_ms = now;
    memcpy(inst.last, cur, sizeof(cur));
}

static double instantaneous(int m) {
    double sum = 0;
    for (int i = 0; i < INST_SAMPLES; i++) sum += inst.samples[m][i];
    return sum / INST_SAMPLES;
}

void resetServerStats(void) {
    memset(&inst, 0, sizeof(inst));
    server.stat_numcommands = server.stat_numconnections = server.stat_rejected_conn = 0;
    server.stat_expiredkeys = server.stat_evictedkeys = 0;
    server.stat_keyspace_hits = server.stat_keyspace_misses = 0;
    server.stat_net_input_bytes = server.stat_net_output_bytes = 0;
    server.stat_total_error_replies = server.stat_oom_rejections = 0;
    server.stat_bigarg_inplace = server.stat_reply_zero_copy = 0;
    server.stat_prefetch_batches = server.stat_prefetch_keys = 0;
    server.stat_data_write_bytes = server.stat_data_read_bytes = server.stat_shm_attach = 0;
    server.stat_remote_get_bytes = 0;
    server.stat_remote_get_refused = 0;
    server.stat_remote_get_timeouts = 0;
    server.stat_client_qbuf_limit_disconnections = server.stat_client_outbuf_limit_disconnections = 0;
    server.stat_client_state_limited = server.stat_client_reply_pauses = 0;
    server.stat_acl_denied_auth = server.stat_acl_denied_cmd = server.stat_acl_denied_key = 0;
    server.stat_acl_denied_channel = 0;
    server.stat_http_connections = server.stat_http_requests = server.stat_http_rejected = 0;
    server.stat_starttime = mstime();
    storeResetStats();
    tenantQuotaResetStats();
    storeCommandStatsReset();
    nerrorStats = 0;
    for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
        cmd->calls = cmd->usec = cmd->rejected_calls = cmd->failed_calls = 0;
        latencyReset(&cmd->latency);
        for (serverCommand *s = cmd->subcommands; s && s->name; s++) {
            s->calls = s->usec = s->rejected_calls = s->failed_calls = 0;
            latencyReset(&s->latency);
        }
    }
}


void statsRecordError(const char *reply, size_t len) {
    if (len && reply[0] == '-') reply++, len--;
    size_t n = 0;
    while (n < len && n < sizeof(errorStats[0].code) - 1 && reply[n] != ' ') n++;
    char code[sizeof(errorStats[0].code)];
    memcpy(code, reply, n);
    code[n] = '\0';
    if (n == 0) snprintf(code, sizeof(code), "ERR");
    for (int i = 0; i < nerrorStats; i++) {
        if (!strcmp(errorStats[i].code, code)) {
            errorStats[i].count++;
            return;
        }
    }
    if (nerrorStats == ERRORSTATS_MAX - 1 && strcmp(code, "OTHER")) snprintf(code, sizeof(code), "OTHER");
    for (int i = 0; i < nerrorStats; i++) {
        if (!strcmp(errorStats[i].code, code)) {
            errorStats[i].count++;
            return;
        }
    }
    snprintf(errorStats[nerrorStats].code, sizeof(errorStats[0].code), "%s", code);
    errorStats[nerrorStats++].count = 1;
}

/* latency_percentiles_usec_<cmd>:p50=...,p99=...,p99.9=... for the
 * percentiles latency-tracking-info-percentiles names. */
static sds catLatencyStats(sds s, serverCommand *cmd) {
    if (latencyCount(cmd->latency)) {
        s = sdscatprintf(s, "latency_percentiles_usec_%s:", cmd->fullname);
        for (int i = 0; i < server.latency_npercentiles; i++) {
            double p = server.latency_percentiles[i];
            s = sdscatdouble(sdscat(s, i ? ",p" : "p"), p);
            s = sdscatprintf(s, "=%.3f", latencyPercentile(cmd->latency, p));
        }
        s = sdscat(s, "\r\n");
    }
    for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) s = catLatencyStats(s, sub);
    return s;
}

static int wantSection(const char *section, const char *name, int *count) {
    int all = !strcasecmp(section, "all") || !strcasecmp(section, "everything");
    int dflt = !strcasecmp(section, "default");
    if (all || dflt || !strcasecmp(section, name)) {
        if ((*count)++) return 2; /* needs a blank line before */
        return 1;
    }
    return 0;
}

static sds sectionHeader(sds s, int want, const char *title) {
    if (want == 2) s = sdscat(s, "\r\n");
    return sdscatprintf(s, "# %s\r\n", title);
}

static sds catCommandStats(sds s, serverCommand *cmd) {
    if (cmd->calls || cmd->failed_calls || cmd->rejected_calls)
        s = sdscatprintf(s, "cmdstat_%s:calls=%lld,usec=%lld,usec_per_call=%.2f,rejected_calls=%lld,failed_calls=%lld\r\n",
                         cmd->fullname, cmd->calls, cmd->usec,
                         cmd->calls ? (double)cmd->usec / (double)cmd->calls : 0.0, cmd->rejected_calls,
                         cmd->failed_calls);
    for (serverCommand *sub = cmd->subcommands; sub && sub->name; sub++) s = catCommandStats(s, sub);
    return s;
}

/* The user INFO answers (NULL: the server's view, HTTP's metrics). */
static const user *infoUser;

sds genInfoString(const char *section) {
    sds s = sdsempty();
    int count = 0, w;
    /* Freed pool extents still being zeroed (zerofree.c) are finished
     * first, so the pool's used/free/objects figures are exact, as they
     * were when frees were immediate. What was queued is still reported. */
    uint64_t zeroing_bytes = zerofreePendingBytes(), zeroing_extents = zerofreePendingExtents();
    zerofreeReclaim(1);
    long long uptime = (monoMs() - server.starttime_mono) / 1000; /* an age: a wall-clock step moves it not */

    if ((w = wantSection(section, "server", &count))) {
        struct utsname name;
        uname(&name);
        s = sectionHeader(s, w, "Server");
        s = sdscatprintf(s,
                         "redis_version:%s\r\n"
                         "mooncake_version:%s\r\n"
                         "redis_mode:standalone\r\n"
                         "os:%s %s %s\r\n"
                         "arch_bits:%d\r\n"
                         "multiplexing_api:epoll\r\n"
                         "process_id:%d\r\n"
                         "run_id:%s\r\n"
                         "tcp_port:%d\r\n"
                         "http_port:%d\r\n"
                         "server_time_usec:%lld\r\n"
                         "uptime_in_seconds:%lld\r\n"
                         "uptime_in_days:%lld\r\n"
                         "hz:%lld\r\n"
                         "executable:%s\r\n"
                         "config_file:%s\r\n",
                         REDIS_COMPAT_VERSION, MOONCAKE_VERSION, name.sysname, name.release, name.machine,
                         (int)(sizeof(long) * 8), (int)getpid(), server.runid, server.port, httpListeningPort(), ustime(), uptime,
                         uptime / 86400, server.hz, server.executable ? server.executable : "",
                         server.configfile ? server.configfile : "");
    }
    if ((w = wantSection(section, "clients", &count))) {
        size_t maxin = 0, maxout = 0;
        for (client *c = server.clients_head; c; c = c->next) {
            if (sdslen(c->querybuf) - c->qb_pos > maxin) maxin = sdslen(c->querybuf) - c->qb_pos;
            if (c->reply_bytes > maxout) maxout = c->reply_bytes;
        }
        s = sectionHeader(s, w, "Clients");
        s = sdscatprintf(s,
                         "connected_clients:%lu\r\n"
                         "maxclients:%lld\r\n"
                         "client_recent_max_input_buffer:%zu\r\n"
                         "client_recent_max_output_buffer:%zu\r\n"
                         "blocked_clients:%lld\r\n"
                         "http_connected_clients:%lld\r\n",
                         server.nclients, server.maxclients, maxin, maxout, server.blocked_clients,
                         httpConnectedClients());
    }
    if ((w = wantSection(section, "memory", &count))) {
        /* used_memory counts the pool's bytes in use with the heap, so
         * redis-cli --stat, exporters and used/maxmemory ratios see the
         * values; the two parts are reported on their own too. */
        size_t heap = zmalloc_used_memory(), rss = zmalloc_get_rss();
        allocStats ps;
        allocGetStats(server.self->alloc, &ps);
        char what[64];
        uint64_t machine = segmentMachineMemory(what, sizeof(what));
        unsigned long long used = (unsigned long long)heap + ps.used;
        memoryUsedUpdatePeak();
        unsigned long long peak = server.stat_peak_memory > used ? server.stat_peak_memory : used;
        char hpk[32];
        bytesToHuman(hpk, sizeof(hpk), peak);
        char hu[32], hr[32], hp[32], hm[32], hs[32];
        bytesToHuman(hu, sizeof(hu), used);
        bytesToHuman(hr, sizeof(hr), rss);
        bytesToHuman(hp, sizeof(hp), (unsigned long long)server.segment_size);
        bytesToHuman(hm, sizeof(hm), (unsigned long long)server.maxmemory);
        bytesToHuman(hs, sizeof(hs), machine);
        s = sectionHeader(s, w, "Memory");
        s = sdscatprintf(s,
                         "used_memory:%llu\r\n"
                         "used_memory_human:%s\r\n"
                         "used_memory_peak:%llu\r\n"
                         "used_memory_peak_human:%s\r\n"
                         "used_memory_startup:%zu\r\n"
                         "used_memory_heap:%zu\r\n"
                         "used_memory_pool:%llu\r\n"
                         "used_memory_dataset:%llu\r\n"
                         "used_memory_rss:%zu\r\n"
                         "used_memory_rss_human:%s\r\n"
                         "total_system_memory:%llu\r\n"
                         "total_system_memory_human:%s\r\n"
                         "pool_size:%lld\r\n"
                         "pool_size_human:%s\r\n"
                         "pool_limit:%llu\r\n"
                         "maxmemory:%lld\r\n"
                         "maxmemory_human:%s\r\n"
                         "maxmemory_policy:%s\r\n"
                         "mem_fragmentation_ratio:%.2f\r\n"
                         "mem_allocator:%s\r\n"
                         "lazyfree_pending_objects:%llu\r\n",
                         used, hu, peak, hpk, server.startup_heap, heap, (unsigned long long)ps.used, (unsigned long long)storeDatasetUsed(), rss, hr, (unsigned long long)machine, hs,
                         server.segment_size, hp, (unsigned long long)ps.limit, server.maxmemory, hm,
                         server.evict_policy == EVICT_LRU ? "allkeys-lru" : "noeviction",
                         (double)rss / (double)memoryExpectedResident(), zmalloc_lib(),
                         storeLazyFreePending());
    }
    if ((w = wantSection(section, "stats", &count))) {
        s = sectionHeader(s, w, "Stats");
        s = sdscatprintf(s,
                         "total_connections_received:%lld\r\n"
                         "total_commands_processed:%lld\r\n"
                         "instantaneous_ops_per_sec:%lld\r\n"
                         "total_net_input_bytes:%lld\r\n"
                         "total_net_output_bytes:%lld\r\n"
                         "instantaneous_input_kbps:%.2f\r\n"
                         "instantaneous_output_kbps:%.2f\r\n"
                         "rejected_connections:%lld\r\n"
                         "expired_keys:%lld\r\n"
                         "evicted_keys:%lld\r\n"
                         "keyspace_hits:%lld\r\n"
                         "keyspace_misses:%lld\r\n"
                         "pubsub_channels:%lu\r\n"
                         "pubsub_patterns:%lu\r\n"
                         "pubsubshard_channels:%lu\r\n"
                         "total_error_replies:%lld\r\n"
                         "oom_rejections:%lld\r\n"
                         "client_query_buffer_limit_disconnections:%lld\r\n"
                         "client_output_buffer_limit_disconnections:%lld\r\n"
                         "client_state_limit_refusals:%lld\r\n"
                         "client_reply_pauses:%lld\r\n"
                         "values_read_in_place:%lld\r\n"
                         "values_sent_from_pool:%lld\r\n"
                         "data_write_bytes:%lld\r\n"
                         "data_read_bytes:%lld\r\n"
                         "shm_attaches:%lld\r\n"
                         "remote_get_bytes:%lld\r\n"
                         "remote_get_in_flight:%lld\r\n"
                         "remote_get_refused:%lld\r\n"
                         "remote_get_timeouts:%lld\r\n"
                         "acl_access_denied_auth:%lld\r\n"
                         "acl_access_denied_cmd:%lld\r\n"
                         "acl_access_denied_key:%lld\r\n"
                         "acl_access_denied_channel:%lld\r\n"
                         "busy_poll_caught:%lld\r\n"
                         "busy_poll_wasted_usec:%lld\r\n"
                         "prefetch_batches:%lld\r\n"
                         "prefetch_keys:%lld\r\n"
                         "http_connections_received:%lld\r\n"
                         "http_requests:%lld\r\n"
                         "http_rejected:%lld\r\n",
                         server.stat_numconnections, server.stat_numcommands, (long long)(instantaneous(0) + 0.5),
                         server.stat_net_input_bytes, server.stat_net_output_bytes, instantaneous(1) / 1024.0,
                         instantaneous(2) / 1024.0, server.stat_rejected_conn, server.stat_expiredkeys,
                         server.stat_evictedkeys, server.stat_keyspace_hits, server.stat_keyspace_misses,
                         pubsubNumChannels(), pubsubNumPatterns(), pubsubNumShardChannels(),
                         server.stat_total_error_replies, server.stat_oom_rejections,
                         server.stat_client_qbuf_limit_disconnections,
                         server.stat_client_outbuf_limit_disconnections, server.stat_client_state_limited,
                         server.stat_client_reply_pauses, server.stat_bigarg_inplace,
                         server.stat_reply_zero_copy, server.stat_data_write_bytes,
                         server.stat_data_read_bytes, server.stat_shm_attach, server.stat_remote_get_bytes,
                         server.remote_get_inflight, server.stat_remote_get_refused, server.stat_remote_get_timeouts,
                         server.stat_acl_denied_auth, server.stat_acl_denied_cmd, server.stat_acl_denied_key,
                         server.stat_acl_denied_channel, server.el ? server.el->spin_caught : 0LL, server.el ? server.el->spin_wasted_us : 0LL,
                         server.stat_prefetch_batches, server.stat_prefetch_keys, server.stat_http_connections,
                         server.stat_http_requests, server.stat_http_rejected);
        s = busyPollInfo(s);
    }
    if ((w = wantSection(section, "store", &count))) {
        storeStats st;
        storeGetStats(&st);
        double frag = st.bytes ? (double)st.pool_used / (double)st.bytes : 1.0;
        double freefrag = st.pool_free ? 1.0 - (double)st.largest_free / (double)st.pool_free : 0.0;
        s = sectionHeader(s, w, "Store");
        s = sdscatprintf(s,
                         "store_objects:%llu\r\n"
                         "store_bytes:%llu\r\n"
                         "store_pool_size:%llu\r\n"
                         "store_pool_used:%llu\r\n"
                         "store_pool_free:%llu\r\n"
                         "store_pool_largest_free:%llu\r\n"
                         "store_pool_free_ranges:%llu\r\n"
                         "store_pool_prefaulted:%llu\r\n"
                         "store_evictions:%llu\r\n"
                         "store_expired:%llu\r\n"
                         "store_oom:%llu\r\n"
                         "store_fragmentation_ratio:%.4f\r\n"
                         "store_free_fragmentation:%.4f\r\n"
                         "store_meta_bytes:%llu\r\n"
                         "store_meta_bytes_per_key:%.1f\r\n"
                         "store_evict_policy:%s\r\n"
                         "store_evict_pending:%lld\r\n",
                         (unsigned long long)st.objects, (unsigned long long)st.bytes,
                         (unsigned long long)st.pool_size, (unsigned long long)st.pool_used,
                         (unsigned long long)st.pool_free, (unsigned long long)st.largest_free,
                         (unsigned long long)st.free_ranges, (unsigned long long)server.self->prefaulted,
                         (unsigned long long)st.evictions, (unsigned long long)st.expired,
                         (unsigned long long)st.oom, frag, freefrag, (unsigned long long)st.meta_bytes,
                         st.objects ? (double)st.meta_bytes / (double)st.objects : 0.0,
                         server.evict_policy == EVICT_LRU ? "lru" : "noeviction", server.evict_pending);
        s = sdscatprintf(s, "store_deferred_frees:%llu\r\nstore_lease_expiries:%llu\r\nstore_pending_puts:%lu\r\n",
                         (unsigned long long)st.deferred_frees, (unsigned long long)st.lease_expiries,
                         storePendingSize());
        /* Every byte of the pool is one of these (store.h): values +
         * pending + deferred + zeroing + free = size. */
        s = sdscatprintf(s,
                         "store_pending_put_bytes:%llu\r\nstore_pending_reclaimed:%llu\r\n"
                         "store_pool_values:%llu\r\nstore_pool_pending:%llu\r\nstore_pool_deferred:%llu\r\n"
                         "store_pool_zeroing:%llu\r\n",
                         (unsigned long long)st.pending_put_bytes, (unsigned long long)st.pending_reclaimed,
                         (unsigned long long)st.pool_values, (unsigned long long)st.pool_pending,
                         (unsigned long long)st.pool_deferred, (unsigned long long)st.pool_zeroing);
        s = zerofreeInfo(s, zeroing_bytes, zeroing_extents);
        uint64_t fit_scans, fit_extents; /* eviction's walks for contiguous room (evict.c) */
        evictFitStats(&fit_scans, &fit_extents);
        s = sdscatprintf(s, "store_evict_fit_scans:%llu\r\nstore_evict_fit_extents:%llu\r\n",
                         (unsigned long long)fit_scans, (unsigned long long)fit_extents);
        s = storeCommandStatsInfo(s);
    }
    if ((w = wantSection(section, "segments", &count))) {
        s = sectionHeader(s, w, "Segments");
        unsigned nseg = segmentCount();
        if (infoUser && aclUserRestricted(infoUser)) { /* a tenant counts what it sees (acl.c) */
            nseg = 0;
            for (uint32_t i = 0; i < segtabLen; i++) nseg += segtab[i] && aclUserSeesSegment(infoUser, segtab[i]);
        }
        s = sdscatprintf(s, "segments:%u\r\nowners:%lu\r\n", nseg, ownerCount());
        s = ownerInfo(s);
        for (uint32_t i = 0; i < segtabLen; i++) {
            segment *sg = segtab[i];
            if (!sg || (infoUser && !aclUserSeesSegment(infoUser, sg))) continue;
            allocStats as = {0};
            if (infoUser == NULL || aclUserSeesSegmentUsage(infoUser, sg)) allocGetStats(sg->alloc, &as);
            s = sdscatprintf(s, "segment_%llu:name=%s,owner=%s,tier=%s,size=%llu,used=%llu,objects=%llu,state=%s\r\n",
                             (unsigned long long)sg->id, sg->name, sg->owner, segmentTierName(sg->tier),
                             (unsigned long long)sg->size, (unsigned long long)as.used,
                             (unsigned long long)as.allocations, segmentStateName(sg));
        }
    }
    if ((w = wantSection(section, "persistence", &count))) {
        /* The append-only log is the only persistence (aof.c): there are no
         * RDB snapshots, and their fields say so for the tools that poll them
         * (redis-cli --stat, exporters). The server loads before it serves. */
        s = sectionHeader(s, w, "Persistence");
        s = sdscatprintf(s,
                         "loading:0\r\n"
                         "async_loading:0\r\n"
                         "rdb_changes_since_last_save:0\r\n"
                         "rdb_bgsave_in_progress:0\r\n"
                         "rdb_last_save_time:%lld\r\n"
                         "rdb_last_bgsave_status:ok\r\n",
                         (long long)(server.starttime_ms / 1000));
        s = aofInfo(s);
    }
    if ((w = wantSection(section, "replication", &count))) {
        s = sectionHeader(s, w, "Replication");
        s = replInfo(s);
    }
    if ((w = wantSection(section, "cpu", &count))) {
        struct rusage self;
        getrusage(RUSAGE_SELF, &self);
        s = sectionHeader(s, w, "CPU");
        s = sdscatprintf(s, "used_cpu_sys:%ld.%06ld\r\nused_cpu_user:%ld.%06ld\r\n", (long)self.ru_stime.tv_sec,
                         (long)self.ru_stime.tv_usec, (long)self.ru_utime.tv_sec, (long)self.ru_utime.tv_usec);
    }
    /* commandstats is not in the default set, as in Redis. */
    if (!strcasecmp(section, "commandstats") || !strcasecmp(section, "all") || !strcasecmp(section, "everything")) {
        s = sectionHeader(s, count++ ? 2 : 1, "Commandstats");
        for (serverCommand *cmd = commandTable; cmd->name; cmd++) s = catCommandStats(s, cmd);
    }
    /* latencystats, like commandstats, only when asked for or with all. */
    if (!strcasecmp(section, "latencystats") || !strcasecmp(section, "all") || !strcasecmp(section, "everything")) {
        s = sectionHeader(s, count++ ? 2 : 1, "Latencystats");
        for (serverCommand *cmd = commandTable; cmd->name; cmd++) s = catLatencyStats(s, cmd);
    }
    if ((w = wantSection(section, "errorstats", &count))) {
        s = sectionHeader(s, w, "Errorstats");
        for (int i = 0; i < nerrorStats; i++)
            s = sdscatprintf(s, "errorstat_%s:count=%lld\r\n", errorStats[i].code, errorStats[i].count);
    }
    if ((w = wantSection(section, "cluster", &count))) {
        s = sectionHeader(s, w, "Cluster");
        s = clusterGenInfoSection(s);
    }
    if ((w = wantSection(section, "tenants", &count))) {
        s = sectionHeader(s, w, "Tenants");
        s = tenantQuotaInfo(s, infoUser);
    }
    if ((w = wantSection(section, "keyspace", &count))) {
        s = sectionHeader(s, w, "Keyspace");
        /* A tenant allowed INFO (@dangerous) counts its own keys, as its
         * DBSIZE does (tenantkeys.c): the server's count is the others'. */
        long long keys = (long long)storeSize(), expires = (long long)storeExpiresSize();
        if (infoUser && aclUserRestricted(infoUser)) {
            keys = tenantKeyCount(infoUser);
            expires = tenantExpiresCount(infoUser);
        }
        if (keys > 0) s = sdscatprintf(s, "db0:keys=%lld,expires=%lld,avg_ttl=0\r\n", keys, expires);
        if (!infoUser || !aclUserRestricted(infoUser)) s = tenantKeysInfo(s); /* all tenants' figures */
    }
    return s;
}

static void infoCommandFor(client *c);

void infoCommand(client *c) {
    infoUser = c->user;
    infoCommandFor(c);
    infoUser = NULL;
}

static void infoCommandFor(client *c) {
    if (c->argc > 2) {
        /* Several sections: concatenate. */
        sds all = sdsempty();
        for (int j = 1; j < c->argc; j++) {
            sds part = genInfoString(c->argv[j]);
            if (sdslen(part) && sdslen(all)) all = sdscat(all, "\r\n");
            all = sdscatsds(all, part);
            sdsfree(part);
        }
        addReplyVerbatim(c, all, sdslen(all), "txt");
        sdsfree(all);
        return;
    }
    sds info = genInfoString(c->argc == 2 ? c->argv[1] : "default");
    addReplyVerbatim(c, info, sdslen(info), "txt");
    sdsfree(info);
}
