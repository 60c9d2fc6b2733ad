/* _mooncake_session.c -- put sessions for Python (libmooncake's
 * mc_put_session_*, under Mooncake's batch_put_session_* calls).
 *
 * A session belongs to the libmooncake handle whose connection started it
 * (the server ends a put only on that connection), while every other call
 * of a Client borrows whichever handle of its pool is idle. So a Client
 * keeps one handle apart for sessions (sess_h, out of the idle pool once
 * taken; libmooncake serialises threads on it), and every session call
 * runs there.
 *
 * A session crosses into Python as a capsule around a small box: the
 * session pointer, cleared when the session is ended or revoked (the
 * library frees it then), and a reference to the Client, so the Client
 * (and the address of its handle, which the library compares) outlives
 * every session it made. A capsule dropped unended frees its session
 * without I/O: the server gives that put back after put-timeout.
 *
 * Threads. The calls hand the session pointer to the library without the
 * GIL, so another thread may end the same session meanwhile, and the
 * library frees it at the end: a write still waiting for the handle, or a
 * second end of it, would then read freed memory (and could end another
 * session that got the same address). So the box is claimed with the GIL
 * held: an end or revoke takes the pointer out of the box before it lets
 * the GIL go (a later call finds no session: MC_ERR_INVALID), and a write
 * counts itself in the box's users, which an end waits to see at zero
 * before the library frees the session. users changes under the Client's
 * lock, and its cond says when it fell.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_mooncake.h"

#define SESSION_CAPSULE "mooncake._mooncake.PutSession"

/* The words of a call's failure for last_error(): the call's own, or the
 * first failed item's when the call answered per item (a session whose
 * connection was lost fails its item, not the call) -- as the batch calls
 * do (_mooncake.c runBatch); without it such a -900 came with no reason.
 * Without the GIL, on the handle's thread. */
#define NOTE_ERR(h, rc, res, n)                                                 \
    do {                                                                        \
        if ((rc) < 0) {                                                         \
            mcpySetTlsErr(mc_last_error(h));                                    \
            break;                                                              \
        }                                                                       \
        for (size_t e_ = 0; e_ < (size_t)(n); e_++)                             \
            if ((res)[e_] < 0) {                                                \
                mcpySetTlsErr(mc_last_error(h));                                \
                break;                                                          \
            }                                                                   \
    } while (0)

typedef struct {
    mc_put_session *s;           /* NULL once an end or revoke took it */
    PyObject *client;            /* a reference: the Client that made it */
    int users;                   /* writes using s without the GIL (the Client's lock) */
} sessionBox;

static void sessionCapsuleFree(PyObject *cap) {
    sessionBox *b = PyCapsule_GetPointer(cap, SESSION_CAPSULE);
    if (b == NULL) return;
    mc_put_session_free(b->s);
    Py_XDECREF(b->client);
    PyMem_Free(b);
}

/* The open session in a capsule of this Client's, or NULL: a capsule of
 * another Client, one already ended, or no capsule at all. */
static sessionBox *boxOf(ClientObject *self, PyObject *o) {
    if (!PyCapsule_IsValid(o, SESSION_CAPSULE)) return NULL;
    sessionBox *b = PyCapsule_GetPointer(o, SESSION_CAPSULE);
    return b && b->s && b->client == (PyObject *)self ? b : NULL;
}

/* Lends sess_h for one call (busy counts it, so close() waits), taking a
 * handle of the pool for it the first time. Called with the GIL (the
 * pool's borrow lets it go while it waits or connects). NULL with *rc set
 * when the Client is closed or no handle could be opened. */
static mc_client *borrowSessionHandle(ClientObject *self, int *rc) {
    mc_client *h = NULL;
    if (mcpyInherited(self)) {
        *rc = MC_ERR_INVALID;
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    if (self->closed) {
        *rc = BINDING_ERR_CLOSED;
    } else if (self->sess_h) {
        h = self->sess_h;
        self->busy++;
    }
    pthread_mutex_unlock(&self->lock);
    if (*rc) mcpySetTlsErr("the store is closed");
    if (h || *rc) return h;
    if ((h = mcpyBorrow(self, rc)) == NULL) return NULL;
    pthread_mutex_lock(&self->lock);
    if (self->sess_h == NULL) {
        self->sess_h = h; /* kept apart from the idle pool from now on */
    } else {
        self->idle[self->nidle++] = h; /* another thread took one first */
        h = self->sess_h;
    }
    pthread_mutex_unlock(&self->lock);
    return h;
}

static void giveBackSessionHandle(ClientObject *self) {
    pthread_mutex_lock(&self->lock);
    self->busy--;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
}

/* The result list of a call some of whose items were answered here
 * (early[i]: a code) and the rest by the library (early[i] == 1: the next
 * of lib, in order); rc < 0 is the library call's failure as a whole,
 * which an item it left without a code of its own takes. */
static PyObject *resultsInOrder(Py_ssize_t n, const long long *early, const long long *lib, int rc) {
    PyObject *out = PyList_New(n);
    size_t next = 0;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        long long v = early[i];
        if (early[i] == 1) {
            v = lib[next++];
            if (rc < 0 && v >= 0) v = rc;
        }
        PyObject *e = PyLong_FromLongLong(v);
        if (e == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, e);
    }
    return out;
}

/* put_session_start(keys, sizes, opts) -> per key a session capsule or a
 * code. */
PyObject *mcpyPutSessionStart(ClientObject *self, PyObject *args) {
    PyObject *keys, *sizes, *optsObj = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &keys, &sizes, &optsObj)) return NULL;
    mc_put_opts opts;
    if (mcpyParseOpts(optsObj, &opts) < 0) return NULL;
    PyObject *kt = PySequence_Tuple(keys), *st = NULL, *out = NULL;
    mc_key *k = NULL;
    size_t *sz = NULL;
    mc_put_session **sess = NULL;
    int *res = NULL;
    if (kt == NULL || (st = PySequence_Tuple(sizes)) == NULL) goto end;
    Py_ssize_t n = PyTuple_GET_SIZE(kt);
    if (PyTuple_GET_SIZE(st) != n) {
        PyErr_SetString(PyExc_ValueError, "one size per key");
        goto end;
    }
    k = PyMem_Calloc((size_t)n + 1, sizeof(*k));
    sz = PyMem_Calloc((size_t)n + 1, sizeof(*sz));
    sess = PyMem_Calloc((size_t)n + 1, sizeof(*sess));
    res = PyMem_Calloc((size_t)n + 1, sizeof(*res));
    if (!k || !sz || !sess || !res) {
        PyErr_NoMemory();
        goto end;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p;
        Py_ssize_t len;
        if (mcpyKeyBytes(PyTuple_GET_ITEM(kt, i), &p, &len) < 0) goto end;
        unsigned long long v = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(st, i));
        if (v == (unsigned long long)-1 && PyErr_Occurred()) goto end;
        if (v > SIZE_MAX) {
            PyErr_SetString(PyExc_OverflowError, "an object size past SIZE_MAX");
            goto end;
        }
        k[i] = (mc_key){p, (size_t)len};
        sz[i] = (size_t)v;
    }
    int rc = 0;
    mc_client *h = borrowSessionHandle(self, &rc);
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        rc = mc_put_session_start(h, (size_t)n, k, sz, &opts, sess, res);
        NOTE_ERR(h, rc, res, n);
        giveBackSessionHandle(self);
        Py_END_ALLOW_THREADS
    }
    if ((out = PyList_New(n)) == NULL) goto end;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e;
        if (sess[i] == NULL) {
            e = PyLong_FromLong(rc < 0 && res[i] == MC_ERR_INVALID ? rc : res[i]);
        } else {
            sessionBox *b = PyMem_Malloc(sizeof(*b));
            e = b ? PyCapsule_New(b, SESSION_CAPSULE, sessionCapsuleFree) : NULL;
            if (e == NULL) {
                PyMem_Free(b);
                mc_put_session_free(sess[i]); /* the server gives it back after put-timeout */
            } else {
                b->s = sess[i];
                b->client = (PyObject *)self;
                b->users = 0;
                Py_INCREF(self);
            }
            sess[i] = NULL;
        }
        if (e == NULL) {
            for (Py_ssize_t j = i + 1; j < n; j++) mc_put_session_free(sess[j]);
            Py_CLEAR(out);
            goto end;
        }
        PyList_SET_ITEM(out, i, e);
    }
end:
    Py_XDECREF(kt);
    Py_XDECREF(st);
    PyMem_Free(k);
    PyMem_Free(sz);
    PyMem_Free(sess);
    PyMem_Free(res);
    return out;
}

/* put_session_write(sessions, ranges) -> per session the bytes written or a
 * code; ranges[i] is a list of (address, offset in the object, length). */
PyObject *mcpyPutSessionWrite(ClientObject *self, PyObject *args) {
    PyObject *sessions, *ranges;
    if (!PyArg_ParseTuple(args, "OO", &sessions, &ranges)) return NULL;
    PyObject *stt = PySequence_Tuple(sessions), *rt = NULL, *out = NULL;
    mc_session_ranges *items = NULL;
    mc_src_range *all = NULL;
    long long *res = NULL, *early = NULL;
    sessionBox **used = NULL;
    Py_ssize_t n = 0, total = 0;
    size_t npass = 0;
    if (stt == NULL) goto end;
    n = PyTuple_GET_SIZE(stt);
    if ((rt = mcpyRangeLists(ranges, n, &total, "one list of ranges per session")) == NULL) goto end;
    items = PyMem_Calloc((size_t)n + 1, sizeof(*items));
    all = PyMem_Calloc((size_t)total + 1, sizeof(*all));
    res = PyMem_Calloc((size_t)n + 1, sizeof(*res));
    early = PyMem_Calloc((size_t)n + 1, sizeof(*early));
    used = PyMem_Calloc((size_t)n + 1, sizeof(*used));
    if (!items || !all || !res || !early || !used) {
        PyErr_NoMemory();
        goto end;
    }
    /* Items refused here (no open session of this Client's, a number past
     * 64 bits, memory it may not read) are handed on empty, and answer
     * their code. */
    mc_session_ranges *pass = items;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        sessionBox *b = boxOf(self, PyTuple_GET_ITEM(stt, i));
        PyObject *seq = PyTuple_GET_ITEM(rt, i);
        Py_ssize_t m = PyTuple_GET_SIZE(seq);
        mc_src_range *r = all + at;
        for (Py_ssize_t j = 0; j < m; j++) {
            unsigned long long v[3];
            int bad = 0;
            if (mcpyRangeTriple(PyTuple_GET_ITEM(seq, j), v, &bad) < 0) goto end;
            if (bad || (v[2] && !mcpyAddressAllowed(self, (uintptr_t)v[0], (size_t)v[2], 0))) early[i] = MC_ERR_INVALID;
            r[j] = (mc_src_range){(const void *)(uintptr_t)v[0], v[1], (size_t)v[2]};
        }
        at += m;
        if (b == NULL) early[i] = MC_ERR_INVALID;
        if (early[i]) continue;
        pass[npass] = (mc_session_ranges){b->s, r, (int)m};
        used[npass++] = b;
        early[i] = 1; /* answered by the library: its result comes in order */
    }
    /* In use from here until the library returns: an end on another
     * thread waits for it (see the top). With the GIL still held, so no
     * end can have taken a session between boxOf and here. Not in a
     * forked child: its lock may be held, and nothing runs there. */
    int counted = npass > 0 && !mcpyInherited(self);
    if (counted) {
        pthread_mutex_lock(&self->lock);
        for (size_t j = 0; j < npass; j++) used[j]->users++;
        pthread_mutex_unlock(&self->lock);
    }
    int rc = 0;
    mc_client *h = npass ? borrowSessionHandle(self, &rc) : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (h) {
        rc = mc_put_session_write(h, npass, pass, res);
        NOTE_ERR(h, rc, res, npass);
        giveBackSessionHandle(self);
    }
    if (counted) {
        pthread_mutex_lock(&self->lock);
        for (size_t j = 0; j < npass; j++) used[j]->users--;
        pthread_cond_broadcast(&self->cond);
        pthread_mutex_unlock(&self->lock);
    }
    Py_END_ALLOW_THREADS
    out = resultsInOrder(n, early, res, rc);
end:
    Py_XDECREF(stt);
    Py_XDECREF(rt);
    PyMem_Free(items);
    PyMem_Free(all);
    PyMem_Free(res);
    PyMem_Free(early);
    PyMem_Free(used);
    return out;
}

/* put_session_end(sessions) / put_session_revoke(sessions) -> per session
 * 0 or a code; every session given is closed, whatever came of it. */
static PyObject *finish(ClientObject *self, PyObject *args, int publish) {
    PyObject *sessions;
    if (!PyArg_ParseTuple(args, "O", &sessions)) return NULL;
    PyObject *stt = PySequence_Tuple(sessions), *out = NULL;
    mc_put_session **pass = NULL;
    sessionBox **taken = NULL;
    int *res = NULL;
    long long *early = NULL, *lres = NULL;
    if (stt == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(stt);
    pass = PyMem_Calloc((size_t)n + 1, sizeof(*pass));
    taken = PyMem_Calloc((size_t)n + 1, sizeof(*taken));
    res = PyMem_Calloc((size_t)n + 1, sizeof(*res));
    early = PyMem_Calloc((size_t)n + 1, sizeof(*early));
    lres = PyMem_Calloc((size_t)n + 1, sizeof(*lres));
    if (!pass || !taken || !res || !early || !lres) {
        PyErr_NoMemory();
        goto end;
    }
    /* Each session is taken out of its box now, with the GIL held (see
     * the top): the same session given twice here, or ended by another
     * thread meanwhile, is found empty and answers INVALID. */
    size_t npass = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        sessionBox *b = boxOf(self, PyTuple_GET_ITEM(stt, i));
        if (b == NULL) {
            early[i] = MC_ERR_INVALID;
            mcpySetTlsErr("not an open put session of this store (ended, revoked, or being ended by another call)");
            continue;
        }
        taken[npass] = b;
        pass[npass++] = b->s;
        b->s = NULL;
        early[i] = 1;
    }
    int rc = 0, inherited = npass > 0 && mcpyInherited(self);
    if (npass && !inherited) {
        /* Writes to these sessions still running on other threads finish
         * first: the library frees each session here. */
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        for (size_t j = 0; j < npass; j++)
            while (taken[j]->users > 0) pthread_cond_wait(&self->cond, &self->lock);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS
    }
    mc_client *h = npass ? borrowSessionHandle(self, &rc) : NULL;
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        rc = publish ? mc_put_session_end(h, npass, pass, res) : mc_put_session_revoke(h, npass, pass, res);
        NOTE_ERR(h, rc, res, npass);
        giveBackSessionHandle(self);
        Py_END_ALLOW_THREADS
    } else {
        /* Closed: the sessions are only freed (the server gives the puts
         * back when their connection is gone). */
        for (size_t j = 0; j < npass; j++) {
            mc_put_session_free(pass[j]);
            res[j] = rc;
        }
    }
    for (size_t j = 0; j < npass; j++) lres[j] = res[j];
    out = resultsInOrder(n, early, lres, 0); /* every session has its own code */
end:
    Py_XDECREF(stt);
    PyMem_Free(pass);
    PyMem_Free(taken);
    PyMem_Free(res);
    PyMem_Free(early);
    PyMem_Free(lres);
    return out;
}

PyObject *mcpyPutSessionEnd(ClientObject *self, PyObject *args) { return finish(self, args, 1); }

PyObject *mcpyPutSessionRevoke(ClientObject *self, PyObject *args) { return finish(self, args, 0); }
