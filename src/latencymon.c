/* latencymon.c -- LATENCY: the latency monitor, as Redis's.
 *
 * Monitoring tools (redis_exporter's latency metrics, redis-cli's doctor
 * habits, Datadog's check) ask LATENCY LATEST and LATENCY HISTORY for the
 * spikes the server saw, and LATENCY HISTOGRAM for each command's latency
 * distribution. Two sources answer them:
 *
 *  - Events. The server times a few things it does -- each command
 *    ("command", or "fast-command" for the CMD_FAST ones), the expiry and
 *    eviction slices of the cron ("expire-cycle", "eviction-cycle") -- and
 *    any that took latency-monitor-threshold ms or more is recorded here:
 *    one sample per event per second (the highest of that second), the last
 *    LATENCY_TS_LEN of them in a ring, and the highest ever seen. 0 turns
 *    the monitor off (the default, as in Redis), and then nothing is timed
 *    for it beyond what the command statistics already time. Event names
 *    are the server's own constants, so the table is a fixed array: no
 *    client can make it grow.
 *
 *  - Histograms. HISTOGRAM reads the per-command histograms INFO
 *    latencystats is built from (latency.c, kept while latency-tracking is
 *    on) and answers Redis's shape: per command, its calls and the
 *    cumulative count of calls below each power of two microseconds, a
 *    bound listed only where the count grows. latency.c's buckets never
 *    straddle a power of two, so the counts are exact.
 *
 * LATENCY GRAPH (an ASCII chart for a terminal) is not served: LATENCY
 * HISTORY gives the same samples to whatever draws them.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "latency.h"
#include "server.h"
#include "util.h"

#define LATENCY_TS_LEN 160 /* samples kept per event, as Redis */
#define LATENCY_EVENTS 16  /* distinct event names: the server's, a handful */

typedef struct {
    long long time; /* unix seconds */
    long long ms;
} latencySample;

static struct latencyEvent {
    const char *name; /* NULL: a free slot */
    latencySample samples[LATENCY_TS_LEN];
    int idx;          /* the next slot to write */
    long long max;    /* the highest sample since the last reset */
} latencyEvents[LATENCY_EVENTS];

static struct latencyEvent *eventByName(const char *name, int create) {
    struct latencyEvent *free_slot = NULL;
    for (int i = 0; i < LATENCY_EVENTS; i++) {
        if (latencyEvents[i].name == NULL) {
            if (!free_slot) free_slot = &latencyEvents[i];
        } else if (!strcasecmp(latencyEvents[i].name, name)) {
            return &latencyEvents[i];
        }
    }
    if (!create || !free_slot) return NULL;
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->name = name;
    return free_slot;
}

void latencyMonitorSample(const char *event, long long ms) {
    if (server.latency_monitor_threshold <= 0 || ms < server.latency_monitor_threshold) return;
    struct latencyEvent *e = eventByName(event, 1);
    if (e == NULL) return;
    long long now = (long long)time(NULL);
    /* Within the same second, keep the higher one in the same slot. */
    int prev = (e->idx + LATENCY_TS_LEN - 1) % LATENCY_TS_LEN;
    if (e->samples[prev].time == now) {
        if (ms > e->samples[prev].ms) e->samples[prev].ms = ms;
    } else {
        e->samples[e->idx].time = now;
        e->samples[e->idx].ms = ms;
        e->idx = (e->idx + 1) % LATENCY_TS_LEN;
    }
    if (ms > e->max) e->max = ms;
}

static const latencySample *latestSample(const struct latencyEvent *e) {
    return &e->samples[(e->idx + LATENCY_TS_LEN - 1) % LATENCY_TS_LEN];
}

static int eventCount(void) {
    int n = 0;
    for (int i = 0; i < LATENCY_EVENTS; i++) n += latencyEvents[i].name != NULL;
    return n;
}

/* The report a person reads: per event, how many spikes are kept, their
 * mean and the worst; or why there is nothing to say. */
static sds latencyDoctor(void) {
    if (server.latency_monitor_threshold <= 0)
        return sdsnew("Latency monitoring is disabled on this server (latency-monitor-threshold is 0). "
                      "CONFIG SET latency-monitor-threshold <milliseconds> records every event that takes "
                      "at least that long; LATENCY LATEST and LATENCY HISTORY then show them.\n");
    if (eventCount() == 0)
        return sdscatprintf(sdsempty(),
                            "No event has reached latency-monitor-threshold (%lld ms) since the monitor was "
                            "started or reset.\n",
                            server.latency_monitor_threshold);
    sds s = sdscatprintf(sdsempty(), "Events that took %lld ms or more (one sample per second, the last %d kept):\n",
                         server.latency_monitor_threshold, LATENCY_TS_LEN);
    for (int i = 0; i < LATENCY_EVENTS; i++) {
        const struct latencyEvent *e = &latencyEvents[i];
        if (e->name == NULL) continue;
        long long n = 0, sum = 0, first = 0;
        for (int j = 0; j < LATENCY_TS_LEN; j++) {
            if (e->samples[j].time == 0) continue;
            n++;
            sum += e->samples[j].ms;
            if (first == 0 || e->samples[j].time < first) first = e->samples[j].time;
        }
        s = sdscatprintf(s, "- %s: %lld spikes in the last %lld s, average %lld ms, latest %lld ms, worst %lld ms.\n",
                         e->name, n, (long long)time(NULL) - first + 1, n ? sum / n : 0, latestSample(e)->ms, e->max);
    }
    if (eventByName("command", 0) || eventByName("fast-command", 0))
        s = sdscat(s, "SLOWLOG GET names the commands behind command spikes.\n");
    if (eventByName("expire-cycle", 0)) s = sdscat(s, "Expire-cycle spikes: many keys expiring at the same time.\n");
    if (eventByName("eviction-cycle", 0))
        s = sdscat(s, "Eviction-cycle spikes: the pool is full; see INFO store (store_evictions) and maxmemory.\n");
    return s;
}

/* One command's distribution, Redis's shape: calls, then the cumulative
 * count below 1, 2, 4 ... microseconds wherever it grows. */
static void addReplyCommandHistogram(client *c, serverCommand *cmd) {
    uint64_t calls = latencyCount(cmd->latency);
    addReplyBulkCString(c, cmd->fullname);
    addReplyMapLen(c, 2);
    addReplyBulkCString(c, "calls");
    addReplyLongLong(c, (long long)calls);
    addReplyBulkCString(c, "histogram_usec");
    long long keys[64], counts[64];
    int n = 0;
    uint64_t prev = 0;
    for (int k = 0; k < 48 && prev < calls; k++) {
        uint64_t below = latencyCountBelow(cmd->latency, UINT64_C(1) << k);
        if (k == 47) below = calls; /* latency.c clamps longer durations here */
        if (below > prev) {
            keys[n] = 1LL << k;
            counts[n++] = (long long)below;
            prev = below;
        }
    }
    addReplyMapLen(c, n);
    for (int i = 0; i < n; i++) {
        addReplyLongLong(c, keys[i]);
        addReplyLongLong(c, counts[i]);
    }
}

static int hasHistogram(serverCommand *cmd) { return latencyCount(cmd->latency) > 0; }

static void latencyHistogram(client *c) {
    if (c->argc == 2) {
        long long n = 0;
        for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
            if (cmd->subcommands) {
                for (serverCommand *sub = cmd->subcommands; sub->name; sub++) n += hasHistogram(sub);
            } else {
                n += hasHistogram(cmd);
            }
        }
        addReplyMapLen(c, n);
        for (serverCommand *cmd = commandTable; cmd->name; cmd++) {
            if (cmd->subcommands) {
                for (serverCommand *sub = cmd->subcommands; sub->name; sub++)
                    if (hasHistogram(sub)) addReplyCommandHistogram(c, sub);
            } else if (hasHistogram(cmd)) {
                addReplyCommandHistogram(c, cmd);
            }
        }
        return;
    }
    /* Named commands: unknown names and commands never called are left
     * out, as Redis does; a name given twice is answered once. */
    serverCommand *found[c->argc];
    int n = 0;
    for (int j = 2; j < c->argc; j++) {
        serverCommand *cmd = lookupCommandByName(c->argv[j]);
        if (cmd == NULL || cmd->subcommands || !hasHistogram(cmd)) continue;
        int dup = 0;
        for (int i = 0; i < n && !dup; i++) dup = found[i] == cmd;
        if (!dup) found[n++] = cmd;
    }
    addReplyMapLen(c, n);
    for (int i = 0; i < n; i++) addReplyCommandHistogram(c, found[i]);
}

void latencyCommand(client *c) {
    const char *sub = c->argv[1];
    if (!strcasecmp(sub, "help") && c->argc == 2) {
        static const char *help[] = {
            "DOCTOR", "    Return a human readable report of the latency events recorded.",
            "HISTORY <event>", "    Return the time-latency samples of the <event> class: [unix-time, ms] pairs.",
            "LATEST", "    Return the latest sample of every event: [event, unix-time, latest-ms, max-ms].",
            "RESET [<event> ...]", "    Reset the samples of the named events (default: all); reply how many.",
            "HISTOGRAM [<command> ...]",
            "    Return each command's calls and the cumulative count of calls below 1, 2, 4 ... microseconds.",
            "    If no commands are specified then all histograms are replied.",
            NULL};
        addReplyHelp(c, help);
    } else if (!strcasecmp(sub, "latest") && c->argc == 2) {
        addReplyArrayLen(c, eventCount());
        for (int i = 0; i < LATENCY_EVENTS; i++) {
            const struct latencyEvent *e = &latencyEvents[i];
            if (e->name == NULL) continue;
            const latencySample *ls = latestSample(e);
            addReplyArrayLen(c, 4);
            addReplyBulkCString(c, e->name);
            addReplyLongLong(c, ls->time);
            addReplyLongLong(c, ls->ms);
            addReplyLongLong(c, e->max);
        }
    } else if (!strcasecmp(sub, "history") && c->argc == 3) {
        const struct latencyEvent *e = eventByName(c->argv[2], 0);
        int n = 0;
        for (int j = 0; e && j < LATENCY_TS_LEN; j++) n += e->samples[j].time != 0;
        addReplyArrayLen(c, n);
        /* Oldest first: the ring from the slot after the newest. */
        for (int j = 0; e && j < LATENCY_TS_LEN; j++) {
            const latencySample *ls = &e->samples[(e->idx + j) % LATENCY_TS_LEN];
            if (ls->time == 0) continue;
            addReplyArrayLen(c, 2);
            addReplyLongLong(c, ls->time);
            addReplyLongLong(c, ls->ms);
        }
    } else if (!strcasecmp(sub, "reset") && c->argc >= 2) {
        long long n = 0;
        if (c->argc == 2) {
            n = eventCount();
            memset(latencyEvents, 0, sizeof(latencyEvents));
        } else {
            for (int j = 2; j < c->argc; j++) {
                struct latencyEvent *e = eventByName(c->argv[j], 0);
                if (e == NULL) continue;
                memset(e, 0, sizeof(*e));
                n++;
            }
        }
        addReplyLongLong(c, n);
    } else if (!strcasecmp(sub, "doctor") && c->argc == 2) {
        sds s = latencyDoctor();
        addReplyVerbatim(c, s, sdslen(s), "txt");
        sdsfree(s);
    } else if (!strcasecmp(sub, "histogram") && c->argc >= 2) {
        latencyHistogram(c);
    } else {
        addReplySubcommandSyntaxError(c);
    }
}
