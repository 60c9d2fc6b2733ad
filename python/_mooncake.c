/* _mooncake.c -- the CPython extension under the mooncake package.
 *
 * One small, low-level type, _mooncake.Client, over libmooncake; the two
 * APIs users see (mooncake.Store and the drop-in
 * mooncake.store.MooncakeDistributedStore) are thin Python on top of it.
 * Keeping the C layer to "lists of keys and buffers in, integer codes out"
 * puts every policy (Mooncake's error numbers, exceptions, defaults) in
 * Python where it is easy to read, and leaves C only what must be in C:
 * taking buffers without copying them and dropping the GIL while bytes move.
 *
 * Registered memory. A raw address (an int, with its size beside it) is
 * trusted only inside memory registered with register(): registration
 * checks /proc/self/maps (host memory must be mapped, and writable to be a
 * get's target) or asks libmooncake whether it is device memory
 * (mc_register MC_MEM_CUDA: the library's CUDA runtime, loaded with dlopen;
 * cuda_available() is its answer, so the binding has no CUDA of its own to
 * disagree with), so a wrong pointer or size is MC_ERR_INVALID, never a
 * crash (the check itself is mcpyAddressAllowed, with the arguments).
 *
 * Threads. A libmooncake handle runs one call at a time (its lock), so a
 * Client keeps a pool of handles: each call borrows an idle one, or opens
 * another (same address and credentials, the registrations replayed) when
 * all are busy, and gives it back. Threads sharing one Client therefore
 * move data at once, each on its own connections, with the GIL released
 * for every transfer and round trip. The first handle is the one that
 * hosts this process's segment (mount), which its heartbeat thread keeps.
 * close() waits for calls in flight, then closes every handle.
 *
 * Errors. Runtime failures come back as libmooncake's negative codes (and
 * last_error() gives the words, per thread); only misuse the caller must
 * fix in the code -- a non-buffer, a read-only buffer for a get -- raises
 * TypeError/ValueError here. BINDING_ERR_CLOSED (-100) is a call on a
 * closed Client.
 *
 * Fork. A child forked from a process that holds a Client inherits it --
 * its handles, whose sockets are the parent's, its hosted segment, its
 * lock perhaps held by a parent thread that is not there, and a busy count
 * of calls that will never end in the child. The Client records the
 * process's fork generation (a pthread_atfork child handler bumps it, so
 * a call pays one load, not a getpid system call), and in another process
 * every call answers MC_ERR_INVALID (the Python layers map it to
 * INVALID_PARAMS, or InvalidArgumentError) with words saying to make a new
 * store there; close(), and the finalizers that run at the child's exit,
 * close the handles the child's way (libmooncake frees its own copies and
 * sends nothing: mooncake.c, "Fork") without taking the lock or waiting
 * for the parent's calls. A Client made in the child works as any other.
 *
 * Files. This one is the module and its one public type, Client: the pool
 * of handles, every method (each a thin body: take the arguments, borrow a
 * handle, run without the GIL, answer), the method table and PyInit. What
 * the methods lean on is cut out by concern, each file with its own notes:
 * _mooncake_args.c (keys, options and buffers in, result lists out),
 * _mooncake_buffer.c (the Buffer type: get_buffer's and views' handle) and
 * _mooncake_async.c (the Op type: a batch running in the background).
 * What they share -- the Client and call structs, the error words -- is in
 * _mooncake.h, prefixed mcpy; everything else is static to its file.
 */
#include "_mooncake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__thread char mcpyTlsErr[512];

void mcpySetTlsErr(const char *msg) { snprintf(mcpyTlsErr, sizeof(mcpyTlsErr), "%s", msg ? msg : ""); }

/* ---- fork ------------------------------------------------------------------ */

unsigned mcpyForkGen;

static void forkChild(void) { __atomic_add_fetch(&mcpyForkGen, 1, __ATOMIC_RELAXED); }

int mcpyInherited(ClientObject *self) {
    if (self->fork_gen == __atomic_load_n(&mcpyForkGen, __ATOMIC_RELAXED)) return 0;
    mcpySetTlsErr("this store was created in another process (inherited across fork()): it cannot be used here; "
                  "create a new one in this process");
    return 1;
}

/* ---- registered memory --------------------------------------------------- */

/* regionT, ClientObject: _mooncake.h (the arguments' checks read them). */

/* Is [addr, addr+len) covered by mappings of this process (and all
 * writable, when asked)? Read from /proc/self/maps, so a bad pointer is
 * found at registration rather than by a fault during a copy. Whole lines
 * (getline): a line ends in the mapped file's path, which any program may
 * make as long as it likes, and a fixed buffer read the rest of a long one
 * as a line of its own -- a path that spells "lo-hi rw-p" there made
 * memory mapped nowhere look mapped. */
static int hostRangeMapped(uintptr_t addr, size_t len, int *writable) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) return 0;
    uintptr_t want = addr, end = addr + len;
    int w = 1;
    char *line = NULL;
    size_t cap = 0;
    while (want < end && getline(&line, &cap, f) > 0) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (hi <= want || lo > want) continue;
        if (perms[0] != 'r') break;
        if (perms[1] != 'w') w = 0;
        want = hi;
    }
    free(line);
    fclose(f);
    *writable = w;
    return want >= end;
}

/* ---- the Client type ----------------------------------------------------- */

static void applySettings(ClientObject *self, mc_client *h) {
    if (self->connect_ms >= 0 || self->io_ms >= 0)
        mc_set_timeouts(h, self->connect_ms >= 0 ? self->connect_ms : 5000, self->io_ms >= 0 ? self->io_ms : 30000);
    if (self->transport >= 0) mc_set_transport(h, self->transport);
    if (self->streams > 0) mc_set_streams(h, self->streams);
    if (self->lease_release >= 0) mc_set_lease_release(h, self->lease_release);
}

/* Borrow a handle: an idle one, else a new one (opened without the GIL),
 * else wait for one to come back. NULL with mcpyTlsErr set, and *rc the code. */
static mc_client *borrow(ClientObject *self, int *rc) {
    mc_client *h = NULL;
    char err[256] = "";
    if (mcpyInherited(self)) {
        *rc = MC_ERR_INVALID;
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (!self->closed && self->nidle == 0 && self->busy >= POOL_MAX)
        pthread_cond_wait(&self->cond, &self->lock);
    if (self->closed) {
        *rc = BINDING_ERR_CLOSED;
    } else if (self->nidle > 0) {
        h = self->idle[--self->nidle];
        self->busy++;
    } else {
        self->busy++; /* reserved: close() waits for this open too */
        pthread_mutex_unlock(&self->lock);
        /* Under the store's timeouts from the first byte: a server that
         * accepts and never answers holds a new handle's probe for the
         * I/O timeout the caller chose, not the library's default 30 s. */
        h = mc_connect_timeouts(self->uri, self->user, self->password,
                                self->connect_ms >= 0 ? self->connect_ms : 5000, self->io_ms >= 0 ? self->io_ms : 30000,
                                err, sizeof(err));
        pthread_mutex_lock(&self->lock);
        if (h == NULL) {
            *rc = MC_ERR_IO;
        } else {
            applySettings(self, h);
            for (int i = 0; i < self->nregions; i++)
                mc_register(h, (void *)self->regions[i].addr, self->regions[i].len, self->regions[i].mem);
            self->all[self->nall++] = h;
        }
        if (h == NULL) {
            self->busy--;
            pthread_cond_broadcast(&self->cond);
        }
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (h == NULL) mcpySetTlsErr(*rc == BINDING_ERR_CLOSED ? "the store is closed" : err);
    return h;
}

mc_client *mcpyBorrow(ClientObject *self, int *rc) { return borrow(self, rc); }

/* Called without the GIL. */
static void giveBack(ClientObject *self, mc_client *h) {
    pthread_mutex_lock(&self->lock);
    self->idle[self->nidle++] = h;
    self->busy--;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

static void noteErr(mc_client *h, long long rc) {
    if (rc < 0) mcpySetTlsErr(mc_last_error(h));
}

/* close() in a child forked from the Client's process (see the top):
 * the parent's calls in flight are not here to wait for, and its lock may
 * be held; each handle is closed the child's way by libmooncake itself. */
static void closeInherited(ClientObject *self) {
    int n = self->nall;
    self->closed = 1;
    self->nall = self->nidle = self->busy = 0;
    self->sess_h = NULL;
    for (int i = n - 1; i >= 0; i--) mc_close(self->all[i]);
}

static void closeAll(ClientObject *self) {
    if (self->fork_gen != __atomic_load_n(&mcpyForkGen, __ATOMIC_RELAXED)) {
        closeInherited(self);
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->closed = 1;
    pthread_cond_broadcast(&self->cond);
    while (self->busy > 0) pthread_cond_wait(&self->cond, &self->lock);
    int n = self->nall;
    self->nall = self->nidle = 0;
    self->sess_h = NULL; /* one of all[] */
    pthread_mutex_unlock(&self->lock);
    /* The first handle hosts the segment: closed last, after the others
     * stopped using it as a place for replicas. */
    for (int i = n - 1; i >= 0; i--) mc_close(self->all[i]);
}

static void Client_dealloc(ClientObject *self) {
    if (self->inited) {
        int inherited = self->fork_gen != __atomic_load_n(&mcpyForkGen, __ATOMIC_RELAXED);
        Py_BEGIN_ALLOW_THREADS
        closeAll(self);
        Py_END_ALLOW_THREADS
        if (!inherited) { /* else they may be held: left to the exit */
            pthread_mutex_destroy(&self->lock);
            pthread_cond_destroy(&self->cond);
        }
    }
    free(self->uri);
    free(self->user);
    free(self->password);
    free(self->regions);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static char *dupOrNull(const char *s) { return s ? strdup(s) : NULL; }

/* Client(uri, user=None, password=None, connect_ms=-1, io_ms=-1,
 *        transport=-1, streams=0, lease_release=-1)
 * Connects the first handle at once, so a wrong address or password fails
 * here (ConnectionError / PermissionError with the server's words). */
static int Client_init(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"uri", "user", "password", "connect_ms", "io_ms", "transport", "streams",
                             "lease_release", NULL};
    const char *uri, *user = NULL, *password = NULL;
    int connect_ms = -1, io_ms = -1, transport = -1, streams = 0, lease_release = -1;
    if (self->inited) {
        PyErr_SetString(PyExc_RuntimeError, "Client already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zziiiii", kwlist, &uri, &user, &password, &connect_ms, &io_ms,
                                     &transport, &streams, &lease_release))
        return -1;
    self->uri = strdup(uri);
    self->user = dupOrNull(user);
    self->password = dupOrNull(password);
    if (self->uri == NULL || (user && !self->user) || (password && !self->password)) {
        PyErr_NoMemory();
        return -1;
    }
    self->connect_ms = connect_ms;
    self->io_ms = io_ms;
    self->transport = transport;
    self->streams = streams;
    self->lease_release = lease_release;
    self->fork_gen = __atomic_load_n(&mcpyForkGen, __ATOMIC_RELAXED);
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->cond, NULL);
    self->inited = 1;
    int rc = 0;
    mc_client *h = borrow(self, &rc);
    if (h == NULL) {
        PyObject *exc = PyExc_ConnectionError;
        if (strstr(mcpyTlsErr, "NOAUTH") || strstr(mcpyTlsErr, "WRONGPASS") || strstr(mcpyTlsErr, "NOPERM") ||
            strstr(mcpyTlsErr, "password") || strstr(mcpyTlsErr, "auth"))
            exc = PyExc_PermissionError;
        PyErr_Format(exc, "cannot connect to %s: %s", uri, mcpyTlsErr);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    giveBack(self, h);
    Py_END_ALLOW_THREADS
    return 0;
}

#define CHECK_INIT(self)                                                        \
    do {                                                                        \
        if (!(self)->inited) {                                                  \
            PyErr_SetString(PyExc_RuntimeError, "Client is not initialised");  \
            return NULL;                                                        \
        }                                                                       \
    } while (0)

/* Items that failed validation are left out of the batch and keep their
 * code; the rest run as one batch. Runs without the GIL. */
static void runBatch(mc_client *h, callArgs *a, const mc_put_opts *opts, int put, long long *out) {
    size_t m = 0;
    size_t *idx = malloc(((size_t)a->n + 1) * sizeof(*idx));
    long long *res = malloc(((size_t)a->n + 1) * sizeof(*res));
    int *ires = malloc(((size_t)a->n + 1) * sizeof(*ires));
    mc_kvv *sub = malloc(((size_t)a->n + 1) * sizeof(*sub));
    if (!idx || !res || !ires || !sub) {
        for (Py_ssize_t i = 0; i < a->n; i++) out[i] = MC_ERR_NOMEM;
        goto done;
    }
    for (Py_ssize_t i = 0; i < a->n; i++) {
        if (a->item_err[i]) {
            out[i] = a->item_err[i];
            continue;
        }
        idx[m] = (size_t)i;
        sub[m++] = a->items[i]; /* the valid items, in order; item_err keeps the rest */
    }
    if (m == 1 && (put || sub[0].iovcnt == 1)) {
        /* One object: the single-key path (no batch framing), from one
         * buffer or several (a put's parts). */
        const mc_kvv *k = &sub[0];
        res[0] = put ? mc_putv(h, k->key, k->keylen, k->iov, k->iovcnt, opts)
                     : mc_get(h, k->key, k->keylen, k->iov[0].iov_base, k->iov[0].iov_len);
        noteErr(h, res[0]);
    } else if (m > 0) {
        int rc;
        if (put) {
            rc = mc_batch_putv(h, m, sub, opts, ires);
            for (size_t j = 0; j < m; j++) res[j] = rc < 0 ? rc : ires[j];
        } else {
            rc = mc_batch_getv(h, m, sub, res);
            if (rc < 0)
                for (size_t j = 0; j < m; j++) res[j] = rc;
        }
        if (rc < 0) {
            noteErr(h, rc);
        } else {
            for (size_t j = 0; j < m; j++)
                if (res[j] < 0) {
                    noteErr(h, res[j]);
                    break;
                }
        }
    }
    for (size_t j = 0; j < m; j++) out[idx[j]] = res[j];
done:
    free(idx);
    free(res);
    free(ires);
    free(sub);
}

/* The body of put and get_into: take the buffers, borrow a handle, run the
 * batch without the GIL, answer a result per key. */
static PyObject *transfer(ClientObject *self, PyObject *keys, PyObject *bufs, PyObject *sizes,
                          const mc_put_opts *opts, int put) {
    callArgs a;
    if (mcpyParseCall(self, &a, keys, bufs, sizes, !put) < 0) return NULL;
    long long *out = PyMem_Calloc((size_t)a.n + 1, sizeof(*out));
    if (out == NULL) {
        mcpyCallArgsFree(&a);
        return PyErr_NoMemory();
    }
    int rc = 0;
    mc_client *h = a.n ? borrow(self, &rc) : NULL;
    if (a.n && h == NULL) {
        for (Py_ssize_t i = 0; i < a.n; i++) out[i] = rc;
    } else if (h) {
        Py_BEGIN_ALLOW_THREADS
        runBatch(h, &a, opts, put, out);
        giveBack(self, h);
        Py_END_ALLOW_THREADS
    }
    PyObject *res = mcpyResultList(out, a.n);
    PyMem_Free(out);
    mcpyCallArgsFree(&a);
    return res;
}

/* put(keys, bufs, sizes=None, opts=None) -> [code per key] */
static PyObject *Client_put(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "bufs", "sizes", "opts", NULL};
    PyObject *keys, *bufs, *sizes = Py_None, *optsObj = Py_None;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO", kwlist, &keys, &bufs, &sizes, &optsObj)) return NULL;
    mc_put_opts opts;
    if (mcpyParseOpts(optsObj, &opts) < 0) return NULL;
    return transfer(self, keys, bufs, sizes, &opts, 1);
}

/* get_into(keys, bufs, sizes=None) -> [bytes read or code per key] */
static PyObject *Client_get_into(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "bufs", "sizes", NULL};
    PyObject *keys, *bufs, *sizes = Py_None;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", kwlist, &keys, &bufs, &sizes)) return NULL;
    return transfer(self, keys, bufs, sizes, NULL, 0);
}

/* get(keys) -> [bytes, or code per key]: the size first (a lease), then
 * the value straight into a new bytes object; once more if it grew. */
static PyObject *Client_get(ClientObject *self, PyObject *args) {
    PyObject *keys;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "O", &keys)) return NULL;
    callArgs a;
    if (mcpyParseCall(self, &a, keys, NULL, NULL, 1) < 0) return NULL;
    PyObject *out = PyList_New(a.n);
    if (out == NULL) {
        mcpyCallArgsFree(&a);
        return NULL;
    }
    int rc = 0;
    mc_client *h = a.n ? borrow(self, &rc) : NULL;
    for (Py_ssize_t i = 0; i < a.n; i++) {
        PyObject *v = NULL;
        long long got = rc;
        for (int tries = 0; h && tries < 3; tries++) {
            long long size;
            Py_BEGIN_ALLOW_THREADS
            size = mc_size(h, a.items[i].key, a.items[i].keylen);
            Py_END_ALLOW_THREADS
            if (size < 0) {
                noteErr(h, size);
                got = size;
                break;
            }
            v = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
            if (v == NULL) break;
            Py_BEGIN_ALLOW_THREADS
            got = mc_get(h, a.items[i].key, a.items[i].keylen, PyBytes_AS_STRING(v), (size_t)size);
            Py_END_ALLOW_THREADS
            if (got >= 0) break;
            noteErr(h, got);
            Py_CLEAR(v);
            if (got != MC_ERR_TOO_SMALL) break; /* replaced by a larger value meanwhile */
        }
        if (v && got >= 0 && got < PyBytes_GET_SIZE(v)) _PyBytes_Resize(&v, (Py_ssize_t)got);
        if (v == NULL && PyErr_Occurred()) {
            if (h) {
                Py_BEGIN_ALLOW_THREADS
                giveBack(self, h);
                Py_END_ALLOW_THREADS
            }
            Py_DECREF(out);
            mcpyCallArgsFree(&a);
            return NULL;
        }
        if (v == NULL) v = PyLong_FromLongLong(got);
        if (v == NULL) {
            Py_DECREF(out);
            out = NULL;
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        giveBack(self, h);
        Py_END_ALLOW_THREADS
    }
    mcpyCallArgsFree(&a);
    return out;
}

/* The calls that take keys alone and answer one int per key (exists,
 * replica_clear, replicas): `call` runs without the GIL on a borrowed
 * handle, with `arg` (its option or output array), into r[0..a->n); the
 * call's count or code. */
typedef int (*keysCallFn)(mc_client *h, size_t n, const mc_key *keys, void *arg, int *results);

static int keysRun(ClientObject *self, const callArgs *a, keysCallFn call, void *arg, int *r) {
    if (a->n == 0) return 0;
    mc_key *k = PyMem_Calloc((size_t)a->n, sizeof(*k));
    if (k == NULL) return MC_ERR_NOMEM;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        k[i].key = a->items[i].key;
        k[i].keylen = a->items[i].keylen;
    }
    int rc = 0, count;
    mc_client *h = borrow(self, &rc);
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        count = call(h, (size_t)a->n, k, arg, r);
        noteErr(h, count);
        giveBack(self, h);
        Py_END_ALLOW_THREADS
    } else {
        count = rc;
    }
    PyMem_Free(k);
    return count;
}

/* -> (count, [int per key]) */
static PyObject *keysCall(ClientObject *self, PyObject *keys, keysCallFn call, void *arg) {
    callArgs a;
    if (mcpyParseCall(self, &a, keys, NULL, NULL, 0) < 0) return NULL;
    int *r = PyMem_Calloc((size_t)a.n + 1, sizeof(*r));
    long long *out = PyMem_Calloc((size_t)a.n + 1, sizeof(*out));
    PyObject *res = NULL;
    if (!r || !out) {
        PyErr_NoMemory();
        goto end;
    }
    int count = keysRun(self, &a, call, arg, r);
    for (Py_ssize_t i = 0; i < a.n; i++) out[i] = count < 0 ? count : r[i];
    PyObject *l = mcpyResultList(out, a.n);
    res = l ? Py_BuildValue("(iN)", count, l) : NULL;
end:
    PyMem_Free(r);
    PyMem_Free(out);
    mcpyCallArgsFree(&a);
    return res;
}

static int existsCall(mc_client *h, size_t n, const mc_key *keys, void *arg, int *results) {
    return mc_batch_exists(h, n, keys, *(const int *)arg, results);
}

static PyObject *Client_exists(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "prefix", "lease", NULL};
    PyObject *keys;
    int prefix = 0, lease = 0;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pp", kwlist, &keys, &prefix, &lease)) return NULL;
    /* exists(keys, prefix=False, lease=False) -> (count, [1/0/code per key]) */
    int flags = (prefix ? MC_EXISTS_PREFIX : 0) | (lease ? MC_EXISTS_LEASE : 0);
    return keysCall(self, keys, existsCall, &flags);
}

static int replicaClearCall(mc_client *h, size_t n, const mc_key *keys, void *arg, int *results) {
    return mc_batch_replica_clear(h, n, keys, (const char *)arg, results);
}

/* ---- views: get_buffer without a copy -------------------------------------- */

typedef struct {
    mc_view **views;
    long long *sizes;
} viewsArg;

static int viewsCall(mc_client *h, size_t n, const mc_key *keys, void *arg, int *results) {
    viewsArg *va = arg;
    int rc = mc_batch_get_views(h, n, keys, va->views, va->sizes);
    for (size_t i = 0; i < n; i++) results[i] = va->sizes[i] < 0 ? (int)va->sizes[i] : 0;
    return rc;
}

/* views(keys) -> per key a read-only BufferHandle onto the object where it
 * lies (held by the store until the handle goes: mc_batch_get_views), or a
 * code (MC_ERR_UNSUPPORTED: no replica in shared memory from here). */
static PyObject *Client_views(ClientObject *self, PyObject *args) {
    PyObject *keys;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "O", &keys)) return NULL;
    callArgs a;
    if (mcpyParseCall(self, &a, keys, NULL, NULL, 0) < 0) return NULL;
    int *r = PyMem_Calloc((size_t)a.n + 1, sizeof(*r));
    viewsArg va = {PyMem_Calloc((size_t)a.n + 1, sizeof(mc_view *)), PyMem_Calloc((size_t)a.n + 1, sizeof(long long))};
    PyObject *out = NULL;
    Py_ssize_t i = 0;
    if (!r || !va.views || !va.sizes) {
        PyErr_NoMemory();
        goto end;
    }
    int got = keysRun(self, &a, viewsCall, &va, r);
    if ((out = PyList_New(a.n)) == NULL) goto end;
    for (; i < a.n; i++) {
        PyObject *v = va.views[i] ? mcpyBufferOfView(va.views[i]) : PyLong_FromLongLong(got < 0 ? got : va.sizes[i]);
        va.views[i] = NULL; /* the handle owns it now, or it was released */
        if (v == NULL) {
            Py_CLEAR(out);
            goto end;
        }
        PyList_SET_ITEM(out, i, v);
    }
end:
    for (Py_ssize_t j = i; va.views && j < a.n; j++) mc_view_release(va.views[j]);
    PyMem_Free(r);
    PyMem_Free(va.views);
    PyMem_Free(va.sizes);
    mcpyCallArgsFree(&a);
    return out;
}

static int replicasCall(mc_client *h, size_t n, const mc_key *keys, void *arg, int *results) {
    return mc_batch_replicas(h, n, keys, (mc_replicas *)arg, results);
}

/* replica_clear(keys, segment=None) -> (count, [1, 0 or code per key]) */
static PyObject *Client_replica_clear(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "segment", NULL};
    PyObject *keys;
    const char *segment = NULL;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|z", kwlist, &keys, &segment)) return NULL;
    char *seg = segment ? PyMem_Malloc(strlen(segment) + 1) : NULL; /* read without the GIL */
    if (segment && !seg) return PyErr_NoMemory();
    if (seg) strcpy(seg, segment);
    PyObject *res = keysCall(self, keys, replicaClearCall, seg);
    PyMem_Free(seg);
    return res;
}

/* replicas(keys) -> per key: a code, or (size, [(seg_id, seg_name, offset,
 * len, base, endpoint), ...]) */
static PyObject *Client_replicas(ClientObject *self, PyObject *args) {
    PyObject *keys;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "O", &keys)) return NULL;
    callArgs a;
    if (mcpyParseCall(self, &a, keys, NULL, NULL, 0) < 0) return NULL;
    int *r = PyMem_Calloc((size_t)a.n + 1, sizeof(*r));
    mc_replicas *info = PyMem_Calloc((size_t)a.n + 1, sizeof(*info));
    PyObject *out = NULL;
    if (!r || !info) {
        PyErr_NoMemory();
        goto end;
    }
    int got = keysRun(self, &a, replicasCall, info, r);
    if ((out = PyList_New(a.n)) == NULL) goto end;
    for (Py_ssize_t i = 0; i < a.n; i++) {
        PyObject *v;
        if (got < 0 || r[i] < 0) {
            v = PyLong_FromLong(got < 0 ? got : r[i]);
        } else {
            int nr = info[i].nreplicas < 0 ? 0 : info[i].nreplicas > MC_MAX_REPLICAS ? MC_MAX_REPLICAS : info[i].nreplicas;
            PyObject *reps = PyList_New(nr);
            for (int j = 0; reps && j < nr; j++) {
                const mc_replica_info *ri = &info[i].replicas[j];
                PyObject *t = Py_BuildValue("(KsKKKs)", (unsigned long long)ri->seg_id, ri->seg_name,
                                            (unsigned long long)ri->offset, (unsigned long long)ri->len,
                                            (unsigned long long)ri->base, ri->endpoint);
                if (t == NULL) {
                    Py_CLEAR(reps);
                    break;
                }
                PyList_SET_ITEM(reps, j, t);
            }
            v = reps ? Py_BuildValue("(KN)", (unsigned long long)info[i].size, reps) : NULL;
        }
        if (v == NULL) {
            Py_CLEAR(out);
            goto end;
        }
        PyList_SET_ITEM(out, i, v);
    }
end:
    PyMem_Free(r);
    PyMem_Free(info);
    mcpyCallArgsFree(&a);
    return out;
}

static PyObject *Client_get_ranges(ClientObject *self, PyObject *args) {
    PyObject *keys, *ranges;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "OO", &keys, &ranges)) return NULL;
    callArgs a;
    if (mcpyParseCall(self, &a, keys, NULL, NULL, 0) < 0) return NULL;
    PyObject *seqs = NULL, *out = NULL;
    mc_kranges *items = NULL;
    mc_range *all = NULL;
    long long *res = NULL;
    char *refused = NULL;
    Py_ssize_t total = 0;
    if ((seqs = mcpyRangeLists(ranges, a.n, &total, "one list of ranges per key")) == NULL) goto end;
    items = PyMem_Calloc((size_t)a.n + 1, sizeof(*items));
    all = PyMem_Calloc((size_t)total + 1, sizeof(*all));
    res = PyMem_Calloc((size_t)total + 1, sizeof(*res));
    refused = PyMem_Calloc((size_t)total + 1, 1);
    if (!items || !all || !res || !refused) {
        PyErr_NoMemory();
        goto end;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < a.n; i++) {
        PyObject *seq = PyTuple_GET_ITEM(seqs, i);
        items[i].key = a.items[i].key;
        items[i].keylen = a.items[i].keylen;
        items[i].ranges = all + at;
        items[i].nranges = (int)PyTuple_GET_SIZE(seq);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(seq); j++) {
            unsigned long long v[3];
            int bad = 0;
            if (mcpyRangeTriple(PyTuple_GET_ITEM(seq, j), v, &bad) < 0) goto end;
            unsigned long long dst = v[0], off = v[1], len = v[2];
            /* Only into registered, writable memory (the library knows the
             * registrations, not whether a host region may be written): a
             * range refused here is handed on empty and answers INVALID. */
            int ok = !bad && (len == 0 || mcpyAddressAllowed(self, (uintptr_t)dst, (size_t)len, 1));
            all[at].dst = ok ? (void *)(uintptr_t)dst : NULL;
            all[at].src_off = ok ? off : 0;
            all[at].len = ok ? (size_t)len : 0;
            refused[at] = !ok;
            at++;
        }
    }
    int rc = 0, got = 0;
    mc_client *h = a.n ? borrow(self, &rc) : NULL;
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        got = mc_batch_get_ranges(h, (size_t)a.n, items, res);
        noteErr(h, got);
        giveBack(self, h);
        Py_END_ALLOW_THREADS
    } else {
        got = rc;
    }
    if ((out = PyList_New(a.n)) == NULL) goto end;
    at = 0;
    for (Py_ssize_t i = 0; i < a.n; i++) {
        for (int j = 0; j < items[i].nranges; j++) {
            if (got < 0) res[at + j] = got;
            else if (refused[at + j]) res[at + j] = MC_ERR_INVALID;
        }
        PyObject *l = mcpyResultList(res + at, items[i].nranges);
        if (l == NULL) {
            Py_CLEAR(out);
            goto end;
        }
        PyList_SET_ITEM(out, i, l);
        at += items[i].nranges;
    }
end:
    Py_XDECREF(seqs);
    PyMem_Free(items);
    PyMem_Free(all);
    PyMem_Free(res);
    PyMem_Free(refused);
    mcpyCallArgsFree(&a);
    return out;
}

/* One-key calls answering a number: size, remove. */
static PyObject *keyCall(ClientObject *self, PyObject *args, int which) {
    PyObject *key;
    const char *k;
    Py_ssize_t kn;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "O", &key) || mcpyKeyBytes(key, &k, &kn) < 0) return NULL;
    if (kn == 0) {
        PyErr_SetString(PyExc_ValueError, "a key cannot be empty");
        return NULL;
    }
    Py_INCREF(key); /* its bytes are read without the GIL */
    int rc = 0;
    long long v;
    mc_client *h = borrow(self, &rc);
    if (h == NULL) {
        v = rc;
    } else {
        Py_BEGIN_ALLOW_THREADS
        v = which == 0 ? mc_size(h, k, (size_t)kn) : mc_remove(h, k, (size_t)kn);
        noteErr(h, v);
        giveBack(self, h);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(key);
    return PyLong_FromLongLong(v);
}

static PyObject *Client_size(ClientObject *self, PyObject *args) { return keyCall(self, args, 0); }
static PyObject *Client_remove(ClientObject *self, PyObject *args) { return keyCall(self, args, 1); }

static PyObject *Client_remove_all(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CHECK_INIT(self);
    int rc = 0;
    long long v;
    mc_client *h = borrow(self, &rc);
    if (h == NULL) return PyLong_FromLong(rc);
    Py_BEGIN_ALLOW_THREADS
    v = mc_remove_all(h);
    noteErr(h, v);
    giveBack(self, h);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(v);
}

/* scan(match=None) -> [key bytes, ...] or a code: every key this Client
 * may see (mc_scan_keys; a tenant's own), for what must look at them all
 * in Python (remove_by_regex: a regular expression the server does not
 * speak). One list; its size is the keyspace's. */
static PyObject *Client_scan(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"match", NULL};
    const char *match = NULL;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z", kwlist, &match)) return NULL;
    int rc = 0;
    mc_key *keys = NULL;
    size_t n = 0;
    mc_client *h = borrow(self, &rc);
    if (h == NULL) return PyLong_FromLong(rc);
    Py_BEGIN_ALLOW_THREADS
    rc = mc_scan_keys(h, match, &keys, &n);
    noteErr(h, rc);
    giveBack(self, h);
    Py_END_ALLOW_THREADS
    if (rc != MC_OK) return PyLong_FromLong(rc);
    if (n > (size_t)PY_SSIZE_T_MAX) {
        free(keys);
        return PyLong_FromLong(MC_ERR_NOMEM);
    }
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out != NULL && i < n; i++) {
        PyObject *k = PyBytes_FromStringAndSize(keys[i].key, (Py_ssize_t)keys[i].keylen);
        if (k == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, k);
    }
    free(keys);
    return out;
}

/* register(addr, size) -> code. Host memory must be mapped (checked in
 * /proc/self/maps); anything else is tried as CUDA device memory, which the
 * library checks. Replayed on every handle of the pool. */
static PyObject *Client_register(ClientObject *self, PyObject *args) {
    unsigned long long addr;
    long long len;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "KL", &addr, &len)) return NULL;
    if (addr == 0 || len <= 0) {
        mcpySetTlsErr("register_buffer needs a non-null address and a positive size");
        return PyLong_FromLong(MC_ERR_INVALID);
    }
    if ((uintptr_t)addr + (uintptr_t)len < (uintptr_t)addr) {
        mcpySetTlsErr("address + size overflows");
        return PyLong_FromLong(MC_ERR_INVALID);
    }
    if (mcpyInherited(self)) return PyLong_FromLong(MC_ERR_INVALID);
    int writable = 0, mapped, rc = MC_OK;
    Py_BEGIN_ALLOW_THREADS
    mapped = hostRangeMapped((uintptr_t)addr, (size_t)len, &writable);
    pthread_mutex_lock(&self->lock);
    if (self->closed) {
        rc = BINDING_ERR_CLOSED;
    } else {
        int mem = mapped ? MC_MEM_HOST : MC_MEM_CUDA;
        /* Registered again at the same address (engines register per layer
         * and again on restart): counted, so one unregister does not undo
         * the other's. The latest registration there first, as unregister
         * takes them (below). */
        for (int i = self->nregions - 1; i >= 0; i--) {
            regionT *r = &self->regions[i];
            if (r->addr == (uintptr_t)addr && r->len >= (size_t)len) {
                r->refs++;
                goto done;
            }
        }
        for (int i = 0; i < self->nall && rc == MC_OK; i++) {
            rc = mc_register(self->all[i], (void *)(uintptr_t)addr, (size_t)len, mem);
            if (rc < 0) {
                if (!mapped && rc == MC_ERR_INVALID)
                    snprintf(mcpyTlsErr, sizeof(mcpyTlsErr),
                             "0x%llx..+%lld is neither mapped host memory nor device memory", addr, len);
                else
                    mcpySetTlsErr(mc_last_error(self->all[i]));
                for (int j = 0; j < i; j++) mc_unregister(self->all[j], (void *)(uintptr_t)addr);
            }
        }
        regionT *nr = rc == MC_OK ? realloc(self->regions, (size_t)(self->nregions + 1) * sizeof(*nr)) : NULL;
        if (rc == MC_OK && nr == NULL) rc = MC_ERR_NOMEM;
        if (nr) {
            self->regions = nr;
            nr[self->nregions++] = (regionT){(uintptr_t)addr, (size_t)len, mem, writable, 1};
        }
    }
done:
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *Client_unregister(ClientObject *self, PyObject *args) {
    unsigned long long addr;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "K", &addr)) return NULL;
    if (mcpyInherited(self)) return PyLong_FromLong(MC_ERR_INVALID);
    int rc = MC_ERR_NOT_FOUND;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    /* Two registrations may start at one address with different lengths
     * (a caller's buffer, and a longer tensor over it that the Store
     * registers for one call): the latest is undone first, as libmooncake
     * removes the latest region at an address, so the call's own goes and
     * the caller's stays. The array keeps registration order for that. */
    for (int i = self->nregions - 1; i >= 0; i--) {
        if (self->regions[i].addr != (uintptr_t)addr) continue;
        rc = MC_OK;
        if (--self->regions[i].refs > 0) break;
        memmove(&self->regions[i], &self->regions[i + 1], (size_t)(self->nregions - i - 1) * sizeof(regionT));
        self->nregions--;
        for (int j = 0; j < self->nall; j++) mc_unregister(self->all[j], (void *)(uintptr_t)addr);
        break;
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0) mcpySetTlsErr("no buffer was registered at that address");
    return PyLong_FromLong(rc);
}

/* mount(size, name) -> segment id or code: this process's memory becomes a
 * segment, hosted by the pool's first handle for the Client's lifetime. */
static PyObject *Client_mount(ClientObject *self, PyObject *args) {
    long long size;
    const char *name;
    int port_min = 0, port_max = 0;
    CHECK_INIT(self);
    if (!PyArg_ParseTuple(args, "Ls|ii", &size, &name, &port_min, &port_max)) return NULL;
    if (size <= 0) {
        mcpySetTlsErr("a segment needs a positive size");
        return PyLong_FromLong(MC_ERR_INVALID);
    }
    if (mcpyInherited(self)) return PyLong_FromLong(MC_ERR_INVALID);
    long long rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->closed || self->nall == 0) {
        rc = BINDING_ERR_CLOSED;
    } else {
        mc_client *h = self->all[0];
        rc = mc_set_host_ports(h, port_min, port_max);
        if (rc == MC_OK) rc = mc_mount(h, (size_t)size, name);
        if (rc == MC_OK) rc = mc_mount_id(h);
        noteErr(h, rc);
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong(rc);
}

/* The name the segment was mounted under (a name ending in ":0" gets the
 * listener's port), or None. */
static PyObject *Client_mount_name(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CHECK_INIT(self);
    if (mcpyInherited(self)) Py_RETURN_NONE;
    char name[512] = "";
    pthread_mutex_lock(&self->lock);
    const char *n = !self->closed && self->nall ? mc_mount_name(self->all[0]) : NULL;
    if (n) snprintf(name, sizeof(name), "%s", n);
    pthread_mutex_unlock(&self->lock);
    if (name[0] == '\0') Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "surrogateescape");
}

static PyObject *Client_close(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->inited) {
        Py_BEGIN_ALLOW_THREADS
        closeAll(self);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Client_closed(ClientObject *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(!self->inited || self->closed);
}

static PyObject *Client_handles(ClientObject *self, void *Py_UNUSED(closure)) {
    if (self->inited && mcpyInherited(self)) return PyLong_FromLong(0); /* none usable here */
    pthread_mutex_lock(&self->lock);
    int n = self->nall;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLong(n);
}

static PyObject *Client_last_transport(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CHECK_INIT(self);
    int t = -1;
    if (mcpyInherited(self)) return PyLong_FromLong(t);
    pthread_mutex_lock(&self->lock);
    if (self->nidle > 0) t = mc_last_transport(self->idle[self->nidle - 1]);
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLong(t);
}

/* ---- non-blocking batches (the Op type: _mooncake_async.c) --------------- */

/* put_async(keys, bufs, sizes=None, opts=None) -> Op, or a code */
static PyObject *Client_put_async(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "bufs", "sizes", "opts", NULL};
    PyObject *keys, *bufs, *sizes = Py_None, *optsObj = Py_None;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO", kwlist, &keys, &bufs, &sizes, &optsObj)) return NULL;
    return mcpySubmit(self, keys, bufs, sizes, optsObj, 1);
}

static PyObject *Client_get_async(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "bufs", "sizes", NULL};
    PyObject *keys, *bufs, *sizes = Py_None;
    CHECK_INIT(self);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", kwlist, &keys, &bufs, &sizes)) return NULL;
    return mcpySubmit(self, keys, bufs, sizes, NULL, 0);
}

/* ---- module -------------------------------------------------------------- */

static PyMethodDef Client_methods[] = {
    {"put", (PyCFunction)(void (*)(void))Client_put, METH_VARARGS | METH_KEYWORDS,
     "put(keys, bufs, sizes=None, opts=None) -> [code per key]"},
    {"get_into", (PyCFunction)(void (*)(void))Client_get_into, METH_VARARGS | METH_KEYWORDS,
     "get_into(keys, bufs, sizes=None) -> [bytes read or code per key]"},
    {"get", (PyCFunction)Client_get, METH_VARARGS, "get(keys) -> [bytes or code per key]"},
    {"exists", (PyCFunction)(void (*)(void))Client_exists, METH_VARARGS | METH_KEYWORDS,
     "exists(keys, prefix=False, lease=False) -> (count, [1/0/code per key])"},
    {"size", (PyCFunction)Client_size, METH_VARARGS, "size(key) -> bytes or code"},
    {"remove", (PyCFunction)Client_remove, METH_VARARGS, "remove(key) -> 1, 0 or code"},
    {"remove_all", (PyCFunction)Client_remove_all, METH_NOARGS, "remove_all() -> count or code"},
    {"scan", (PyCFunction)(void (*)(void))Client_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(match=None) -> [every key this client may see] or code"},
    {"register", (PyCFunction)Client_register, METH_VARARGS, "register(addr, size) -> code"},
    {"unregister", (PyCFunction)Client_unregister, METH_VARARGS, "unregister(addr) -> code"},
    {"mount", (PyCFunction)Client_mount, METH_VARARGS,
     "mount(size, name, port_min=0, port_max=0) -> segment id or code"},
    {"mount_name", (PyCFunction)Client_mount_name, METH_NOARGS, "the name mounted, or None"},
    {"replica_clear", (PyCFunction)(void (*)(void))Client_replica_clear, METH_VARARGS | METH_KEYWORDS,
     "replica_clear(keys, segment=None) -> (count, [1, 0 or code per key])"},
    {"views", (PyCFunction)Client_views, METH_VARARGS,
     "views(keys) -> per key a read-only BufferHandle onto the stored object, or a code"},
    {"replicas", (PyCFunction)Client_replicas, METH_VARARGS,
     "replicas(keys) -> per key a code or (size, [(seg_id, seg_name, offset, len, base, endpoint)])"},
    {"get_ranges", (PyCFunction)Client_get_ranges, METH_VARARGS,
     "get_ranges(keys, ranges) -> per key the results of its (address, offset, length) ranges"},
    {"put_async", (PyCFunction)(void (*)(void))Client_put_async, METH_VARARGS | METH_KEYWORDS,
     "put_async(keys, bufs, sizes=None, opts=None) -> Op or code"},
    {"get_async", (PyCFunction)(void (*)(void))Client_get_async, METH_VARARGS | METH_KEYWORDS,
     "get_async(keys, bufs, sizes=None) -> Op or code"},
    {"last_transport", (PyCFunction)Client_last_transport, METH_NOARGS, "what moved the last replica"},
    {"put_session_start", (PyCFunction)mcpyPutSessionStart, METH_VARARGS,
     "put_session_start(keys, sizes, opts=None) -> per key a session or a code"},
    {"put_session_write", (PyCFunction)mcpyPutSessionWrite, METH_VARARGS,
     "put_session_write(sessions, ranges) -> per session bytes written or a code; ranges: (address, offset, length)"},
    {"put_session_end", (PyCFunction)mcpyPutSessionEnd, METH_VARARGS,
     "put_session_end(sessions) -> per session 0 or a code (every session given is closed)"},
    {"put_session_revoke", (PyCFunction)mcpyPutSessionRevoke, METH_VARARGS,
     "put_session_revoke(sessions) -> per session 0 or a code (every session given is closed)"},
    {"close", (PyCFunction)Client_close, METH_NOARGS, "close(): wait for calls in flight, then disconnect"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Client_getset[] = {
    {"closed", (getter)Client_closed, NULL, "True after close()", NULL},
    {"handles", (getter)Client_handles, NULL, "library handles open in the pool", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._mooncake.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A pool of libmooncake handles to one server or cluster (low level: see mooncake.Store).",
    .tp_methods = Client_methods,
    .tp_getset = Client_getset,
    .tp_init = (initproc)Client_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *mod_last_error(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    return PyUnicode_DecodeUTF8(mcpyTlsErr, (Py_ssize_t)strlen(mcpyTlsErr), "replace");
}

static PyObject *mod_strerror(PyObject *Py_UNUSED(m), PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
    if (code == BINDING_ERR_CLOSED) return PyUnicode_FromString("the store is closed");
    return PyUnicode_FromString(mc_strerror(code));
}

/* cuda_available() -> (bool, reason): libmooncake's own answer, through
 * the runtime it loads with dlopen (MC_CUDA_LIBRARY), so the binding and
 * the library never disagree about device memory. */
static PyObject *mod_cuda_available(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    char why[512] = "";
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = mc_cuda_available(why, sizeof(why));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why);
}

static PyMethodDef module_methods[] = {
    {"cuda_available", mod_cuda_available, METH_NOARGS,
     "cuda_available() -> (bool, reason): can libmooncake move device memory here?"},
    {"last_error", mod_last_error, METH_NOARGS, "The words of this thread's last failure."},
    {"strerror", mod_strerror, METH_VARARGS, "strerror(code) -> the library's name for a code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_mooncake", "libmooncake for Python (low level; see the mooncake package).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

static void forkInstall(void) { pthread_atfork(NULL, NULL, forkChild); }

PyMODINIT_FUNC PyInit__mooncake(void) {
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&mcpyOpType) < 0 || PyType_Ready(&mcpyBufferType) < 0)
        return NULL;
    static pthread_once_t forkOnce = PTHREAD_ONCE_INIT;
    pthread_once(&forkOnce, forkInstall);
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&ClientType);
    if (PyModule_AddObject(m, "Client", (PyObject *)&ClientType) < 0) goto err;
    Py_INCREF(&mcpyOpType);
    if (PyModule_AddObject(m, "Op", (PyObject *)&mcpyOpType) < 0) goto err;
    Py_INCREF(&mcpyBufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&mcpyBufferType) < 0) goto err;
    struct {
        const char *name;
        long v;
    } consts[] = {
        {"OK", MC_OK},
        {"ERR_NOT_FOUND", MC_ERR_NOT_FOUND},
        {"ERR_EXISTS", MC_ERR_EXISTS},
        {"ERR_NOSPACE", MC_ERR_NOSPACE},
        {"ERR_LEASE_EXPIRED", MC_ERR_LEASE_EXPIRED},
        {"ERR_TOO_SMALL", MC_ERR_TOO_SMALL},
        {"ERR_INVALID", MC_ERR_INVALID},
        {"ERR_AUTH", MC_ERR_AUTH},
        {"ERR_PROTOCOL", MC_ERR_PROTOCOL},
        {"ERR_IO", MC_ERR_IO},
        {"ERR_UNSUPPORTED", MC_ERR_UNSUPPORTED},
        {"ERR_NOT_READY", MC_ERR_NOT_READY},
        {"ERR_SERVER", MC_ERR_SERVER},
        {"ERR_NOMEM", MC_ERR_NOMEM},
        {"ERR_PENDING", MC_ERR_PENDING},
        {"ERR_CLOSED", BINDING_ERR_CLOSED},
        {"TRANSPORT_AUTO", MC_TRANSPORT_AUTO},
        {"TRANSPORT_SHM", MC_TRANSPORT_SHM},
        {"TRANSPORT_TCP", MC_TRANSPORT_TCP},
        {"TRANSPORT_RDMA", MC_TRANSPORT_RDMA},
        {"MAX_IOV", MC_MAX_IOV},
    };
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0) goto err;
    if (PyModule_AddStringConstant(m, "library_version", mc_version()) < 0) goto err;
    return m;
err:
    Py_DECREF(m);
    return NULL;
}
