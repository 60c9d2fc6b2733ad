/* cluster_node.c -- a node's record: memory and its JSON form in etcd.
 *
 * Kept apart from the server (no globals, only zmalloc, sds and jansson)
 * because the record is wire input: every node parses what any other
 * wrote into etcd, and a short fuzz run (tests/fuzz/fuzz_etcd.c) feeds the
 * parser hostile bytes. A record that fails any check is refused whole.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "zmalloc.h"

clusterNode *clusterNodeCreate(const char *id) {
    clusterNode *n = zcalloc(sizeof(*n));
    snprintf(n->id, sizeof(n->id), "%s", id);
    snprintf(n->group, sizeof(n->group), "%s", id);
    snprintf(n->role, sizeof(n->role), "primary");
    return n;
}

void clusterNodeFree(clusterNode *n) {
    if (!n) return;
    zfree(n->ranges);
    zfree(n->migrating);
    zfree(n->importing);
    zfree(n);
}

int clusterValidId(const char *s) {
    if (!s || strlen(s) != CLUSTER_NAMELEN) return 0;
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789abcdef", *p)) return 0;
    return 1;
}

sds clusterNodeToJson(const clusterNode *n) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(n->id));
    json_object_set_new(o, "group", json_string(n->group));
    json_object_set_new(o, "ip", json_string(n->ip));
    json_object_set_new(o, "port", json_integer(n->port));
    json_object_set_new(o, "cport", json_integer(n->cport));
    json_object_set_new(o, "epoch", json_integer(n->config_epoch));
    json_object_set_new(o, "role", json_string(n->role));
    json_object_set_new(o, "primary", json_string(n->primary));
    json_t *slots = json_array();
    for (int i = 0; i < n->nranges; i++) json_array_append_new(slots, json_pack("[ii]", n->ranges[i][0], n->ranges[i][1]));
    json_object_set_new(o, "slots", slots);
    json_t *mig = json_array(), *imp = json_array();
    for (int i = 0; i < n->nmigrating; i++)
        json_array_append_new(mig, json_pack("[is]", n->migrating[i].slot, n->migrating[i].node));
    for (int i = 0; i < n->nimporting; i++)
        json_array_append_new(imp, json_pack("[is]", n->importing[i].slot, n->importing[i].node));
    json_object_set_new(o, "migrating", mig);
    json_object_set_new(o, "importing", imp);
    char *txt = json_dumps(o, JSON_COMPACT);
    sds s = sdsnew(txt);
    free(txt);
    json_decref(o);
    return s;
}

static int parseOpenSlots(json_t *arr, clusterSlotState **out, int *count) {
    if (!arr) return 0;
    if (!json_is_array(arr) || json_array_size(arr) > CLUSTER_SLOTS) return -1;
    size_t n = json_array_size(arr);
    *out = n ? zcalloc(sizeof(clusterSlotState) * n) : NULL;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        json_t *s = json_array_get(e, 0), *id = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_integer(s) || !json_is_string(id)) return -1;
        long long slot = json_integer_value(s);
        if (slot < 0 || slot >= CLUSTER_SLOTS || !clusterValidId(json_string_value(id))) return -1;
        (*out)[i].slot = (int)slot;
        memcpy((*out)[i].node, json_string_value(id), CLUSTER_NAMELEN + 1);
        (*count)++;
    }
    return 0;
}

/* Records come off the wire (etcd): every field is checked, and a record
 * that fails any check is ignored whole, with a log line saying why. */
clusterNode *clusterNodeFromJson(const char *buf, size_t len, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *o = json_loadb(buf, len, 0, &jerr);
    clusterNode *n = NULL;
    if (!o || !json_is_object(o)) {
        snprintf(err, errlen, "not a JSON object (%s)", o ? "wrong type" : jerr.text);
        goto err;
    }
    json_t *id = json_object_get(o, "id"), *group = json_object_get(o, "group"), *ip = json_object_get(o, "ip");
    json_t *port = json_object_get(o, "port"), *cport = json_object_get(o, "cport"), *epoch = json_object_get(o, "epoch");
    json_t *role = json_object_get(o, "role"), *primary = json_object_get(o, "primary");
    if (!json_is_string(id) || !clusterValidId(json_string_value(id)) || !json_is_string(group) ||
        !clusterValidId(json_string_value(group))) {
        snprintf(err, errlen, "bad id or group");
        goto err;
    }
    if (!json_is_string(ip) || strlen(json_string_value(ip)) == 0 || strlen(json_string_value(ip)) >= 64 ||
        strspn(json_string_value(ip), "0123456789abcdefABCDEF.:-_ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ") !=
            strlen(json_string_value(ip)) ||
        !json_is_integer(port) || json_integer_value(port) < 0 || json_integer_value(port) > 65535 ||
        !json_is_integer(cport) || json_integer_value(cport) < 0 || json_integer_value(cport) > 65535) {
        snprintf(err, errlen, "bad address");
        goto err;
    }
    if (!json_is_integer(epoch) || json_integer_value(epoch) < 0) {
        snprintf(err, errlen, "bad epoch");
        goto err;
    }
    n = clusterNodeCreate(json_string_value(id));
    snprintf(n->group, sizeof(n->group), "%s", json_string_value(group));
    snprintf(n->ip, sizeof(n->ip), "%s", json_string_value(ip));
    n->port = (int)json_integer_value(port);
    n->cport = (int)json_integer_value(cport);
    n->config_epoch = json_integer_value(epoch);
    if (json_is_string(role) && strlen(json_string_value(role)) < sizeof(n->role))
        snprintf(n->role, sizeof(n->role), "%s", json_string_value(role));
    if (json_is_string(primary) && (json_string_value(primary)[0] == '\0' || clusterValidId(json_string_value(primary))))
        snprintf(n->primary, sizeof(n->primary), "%s", json_string_value(primary));
    json_t *slots = json_object_get(o, "slots");
    if (slots) {
        if (!json_is_array(slots) || json_array_size(slots) > CLUSTER_SLOTS) {
            snprintf(err, errlen, "bad slots");
            goto err;
        }
        size_t nr = json_array_size(slots);
        n->ranges = nr ? zmalloc(sizeof(int[2]) * nr) : NULL;
        for (size_t i = 0; i < nr; i++) {
            json_t *r = json_array_get(slots, i);
            json_t *a = json_array_get(r, 0), *b = json_array_get(r, 1);
            if (!json_is_array(r) || json_array_size(r) != 2 || !json_is_integer(a) || !json_is_integer(b) ||
                json_integer_value(a) < 0 || json_integer_value(b) >= CLUSTER_SLOTS ||
                json_integer_value(a) > json_integer_value(b)) {
                snprintf(err, errlen, "bad slot range");
                goto err;
            }
            n->ranges[i][0] = (int)json_integer_value(a);
            n->ranges[i][1] = (int)json_integer_value(b);
            n->nranges++;
        }
    }
    if (parseOpenSlots(json_object_get(o, "migrating"), &n->migrating, &n->nmigrating) != 0 ||
        parseOpenSlots(json_object_get(o, "importing"), &n->importing, &n->nimporting) != 0) {
        snprintf(err, errlen, "bad migrating/importing");
        goto err;
    }
    json_decref(o);
    return n;
err:
    clusterNodeFree(n);
    if (o) json_decref(o);
    return NULL;
}

clusterNode *clusterNodeClone(const clusterNode *n) {
    clusterNode *c = zmalloc(sizeof(*c));
    *c = *n;
    c->ranges = n->nranges ? zmalloc(sizeof(int[2]) * (size_t)n->nranges) : NULL;
    if (n->nranges) memcpy(c->ranges, n->ranges, sizeof(int[2]) * (size_t)n->nranges);
    c->migrating = n->nmigrating ? zmalloc(sizeof(clusterSlotState) * (size_t)n->nmigrating) : NULL;
    if (n->nmigrating) memcpy(c->migrating, n->migrating, sizeof(clusterSlotState) * (size_t)n->nmigrating);
    c->importing = n->nimporting ? zmalloc(sizeof(clusterSlotState) * (size_t)n->nimporting) : NULL;
    if (n->nimporting) memcpy(c->importing, n->importing, sizeof(clusterSlotState) * (size_t)n->nimporting);
    return c;
}

