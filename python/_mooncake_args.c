/* _mooncake_args.c -- what a call of the extension takes from Python and
 * gives back: keys, options and buffers in, result lists out.
 *
 * Buffers. Each value is given as an object with the buffer protocol
 * (bytes, bytearray, memoryview, NumPy arrays, ...) or as a raw address
 * (an int, with its size beside it), or as a list of these for one object
 * made of several buffers (scatter-gather). Objects are held with
 * PyObject_GetBuffer for the whole call -- a bytearray cannot be resized
 * under us -- and the keys are copied into a tuple first, so another
 * thread changing the caller's lists while the GIL is released changes
 * nothing here. A raw address is trusted only inside memory registered
 * with register() (how registration checks it: _mooncake.c), so a wrong
 * pointer or size is MC_ERR_INVALID, never a crash.
 *
 * All that one call takes is held in one callArgs (_mooncake.h) until
 * mcpyCallArgsFree: the key tuple the items point into, the Py_buffer
 * views, the iovecs over them. The batch that runs without the GIL -- or
 * the Op, for as long as it runs (_mooncake_async.c) -- reads only these.
 * An item refused here (an address outside registered memory) is not an
 * exception: its code waits in item_err and the batch runs without it.
 * Only misuse the caller must fix in the code raises.
 */
#include "_mooncake.h"

#include <stdio.h>
#include <string.h>

int mcpyKeyBytes(PyObject *o, const char **p, Py_ssize_t *n) {
    if (PyUnicode_Check(o)) {
        *p = PyUnicode_AsUTF8AndSize(o, n);
        return *p ? 0 : -1;
    }
    if (PyBytes_Check(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "a key must be str or bytes, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
}

/* opts: None or (replicas, prefer or None, pin_ms, hard_pin, replace
 * [, prefer_is_hint]). The prefer string points into the tuple, which the
 * caller keeps. */
int mcpyParseOpts(PyObject *o, mc_put_opts *opts) {
    memset(opts, 0, sizeof(*opts));
    if (o == NULL || o == Py_None) return 0;
    PyObject *prefer;
    int hard, replace, hint = 0;
    if (!PyArg_ParseTuple(o, "iOLpp|p;opts must be (replicas, prefer, pin_ms, hard_pin, replace[, hint])",
                          &opts->replicas, &prefer, &opts->pin_ms, &hard, &replace, &hint))
        return -1;
    opts->prefer_hint = hint;
    if (opts->replicas < 0 || opts->replicas > 8) {
        PyErr_SetString(PyExc_ValueError, "replica_num must be between 1 and 8");
        return -1;
    }
    if (opts->pin_ms < 0) {
        PyErr_SetString(PyExc_ValueError, "a pin time cannot be negative");
        return -1;
    }
    opts->hard_pin = hard;
    opts->replace = replace;
    if (prefer != Py_None) {
        if (!PyUnicode_Check(prefer)) {
            PyErr_SetString(PyExc_TypeError, "preferred segment must be str");
            return -1;
        }
        opts->prefer = PyUnicode_AsUTF8(prefer);
        if (opts->prefer == NULL) return -1;
        if (opts->prefer[0] == '\0') opts->prefer = NULL;
    }
    return 0;
}

void mcpyCallArgsFree(callArgs *a) {
    for (Py_ssize_t i = 0; i < a->nviews; i++) PyBuffer_Release(&a->views[i]);
    PyMem_Free(a->views);
    PyMem_Free(a->iov);
    PyMem_Free(a->items);
    PyMem_Free(a->item_err);
    Py_XDECREF(a->keys);
    memset(a, 0, sizeof(*a));
}

/* A raw address is accepted only inside a registered region (writable host
 * memory for a get's target). */
int mcpyAddressAllowed(ClientObject *self, uintptr_t p, size_t len, int write_into) {
    int ok = 0;
    if (mcpyInherited(self)) return 0; /* the call fails as a whole anyway; the lock may be held */
    pthread_mutex_lock(&self->lock);
    for (int i = 0; i < self->nregions && !ok; i++) {
        const regionT *r = &self->regions[i];
        if (p >= r->addr && len <= r->len && p - r->addr <= r->len - len)
            ok = !write_into || r->mem == MC_MEM_CUDA || r->writable;
    }
    pthread_mutex_unlock(&self->lock);
    return ok;
}

static int addPiece(callArgs *a, void *base, size_t len) {
    if (a->niov == a->capiov) {
        Py_ssize_t cap = a->capiov ? a->capiov * 2 : 16;
        struct iovec *n = PyMem_Realloc(a->iov, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->iov = n;
        a->capiov = cap;
    }
    a->iov[a->niov].iov_base = base;
    a->iov[a->niov].iov_len = len;
    a->niov++;
    return 0;
}

/* One piece: a buffer object, or an int address with its size. A bad
 * address is not an exception: the item fails with MC_ERR_INVALID. */
static int takePiece(ClientObject *self, callArgs *a, Py_ssize_t item, PyObject *piece, PyObject *size,
                     int write_into, Py_ssize_t maxviews) {
    if (PyLong_Check(piece)) {
        unsigned long long p = PyLong_AsUnsignedLongLong(piece);
        if (p == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "a buffer address must be a non-negative int");
            return -1;
        }
        if (size == NULL || !PyLong_Check(size)) {
            PyErr_SetString(PyExc_TypeError, "an address needs an int size beside it");
            return -1;
        }
        long long len = PyLong_AsLongLong(size);
        if (len == -1 && PyErr_Occurred()) return -1;
        if (len < 0) {
            PyErr_SetString(PyExc_ValueError, "a size cannot be negative");
            return -1;
        }
        if (p == 0 || len == 0 || !mcpyAddressAllowed(self, (uintptr_t)p, (size_t)len, write_into)) {
            if (a->item_err[item] == 0) {
                a->item_err[item] = MC_ERR_INVALID;
                snprintf(mcpyTlsErr, sizeof(mcpyTlsErr),
                         "address 0x%llx size %lld is not inside memory registered with register_buffer%s", p, len,
                         write_into ? " (writable)" : "");
            }
        }
        return addPiece(a, (void *)(uintptr_t)p, (size_t)len);
    }
    if (a->nviews == maxviews) {
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return -1;
    }
    Py_buffer *v = &a->views[a->nviews];
    int flags = PyBUF_C_CONTIGUOUS | (write_into ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(piece, v, flags) != 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_ValueError)) { /* NumPy: "buffer source array is read-only" */
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s needs %s, not %.100s", write_into ? "a get" : "a put",
                         write_into ? "a writable C-contiguous buffer" : "a C-contiguous buffer (bytes-like)",
                         Py_TYPE(piece)->tp_name);
        }
        return -1;
    }
    a->nviews++;
    return addPiece(a, v->buf, (size_t)v->len);
}

static Py_ssize_t countPieces(PyObject *buf) {
    if (PyList_Check(buf)) return PyList_GET_SIZE(buf);
    return 1;
}

/* keys: sequence of str/bytes; bufs: sequence, one per key, each a piece
 * or a list of pieces; sizes: None or a sequence shaped like bufs giving
 * the size of every int piece. */
int mcpyParseCall(ClientObject *self, callArgs *a, PyObject *keys, PyObject *bufs, PyObject *sizes,
                  int write_into) {
    memset(a, 0, sizeof(*a));
    a->keys = PySequence_Tuple(keys);
    if (a->keys == NULL) return -1;
    a->n = PyTuple_GET_SIZE(a->keys);
    PyObject *bt = NULL, *st = NULL;
    if (bufs) {
        bt = PySequence_Tuple(bufs);
        if (bt == NULL) goto err;
        if (PyTuple_GET_SIZE(bt) != a->n) {
            PyErr_Format(PyExc_ValueError, "%zd keys but %zd buffers", a->n, PyTuple_GET_SIZE(bt));
            goto err;
        }
        if (sizes && sizes != Py_None) {
            st = PySequence_Tuple(sizes);
            if (st == NULL) goto err;
            if (PyTuple_GET_SIZE(st) != a->n) {
                PyErr_Format(PyExc_ValueError, "%zd keys but %zd sizes", a->n, PyTuple_GET_SIZE(st));
                goto err;
            }
        }
    }
    a->items = PyMem_Calloc((size_t)a->n + 1, sizeof(*a->items));
    a->item_err = PyMem_Calloc((size_t)a->n + 1, sizeof(*a->item_err));
    Py_ssize_t maxviews = 0;
    for (Py_ssize_t i = 0; bt && i < a->n; i++) maxviews += countPieces(PyTuple_GET_ITEM(bt, i));
    a->views = PyMem_Calloc((size_t)maxviews + 1, sizeof(*a->views));
    if (a->items == NULL || a->item_err == NULL || a->views == NULL) {
        PyErr_NoMemory();
        goto err;
    }
    Py_ssize_t *first = PyMem_Calloc((size_t)a->n + 1, sizeof(*first));
    if (first == NULL) {
        PyErr_NoMemory();
        goto err;
    }
    for (Py_ssize_t i = 0; i < a->n; i++) {
        const char *k;
        Py_ssize_t kn;
        if (mcpyKeyBytes(PyTuple_GET_ITEM(a->keys, i), &k, &kn) < 0) goto err_first;
        if (kn == 0) {
            PyErr_SetString(PyExc_ValueError, "a key cannot be empty");
            goto err_first;
        }
        a->items[i].key = k;
        a->items[i].keylen = (size_t)kn;
        first[i] = a->niov;
        if (bt == NULL) continue;
        PyObject *b = PyTuple_GET_ITEM(bt, i), *s = st ? PyTuple_GET_ITEM(st, i) : NULL;
        if (PyList_Check(b)) {
            /* Pieces and sizes are walked as tuples of their own: a piece's
             * buffer export may run Python code (__buffer__, 3.12) that
             * shrinks the very list being walked. */
            PyObject *bp = PyList_AsTuple(b), *sp = NULL;
            int rc = -1;
            if (bp == NULL) goto err_first;
            Py_ssize_t np = PyTuple_GET_SIZE(bp);
            if (np == 0 || np > MC_MAX_IOV) {
                PyErr_Format(PyExc_ValueError, "an object is made of 1 to %d buffers, not %zd", MC_MAX_IOV, np);
                goto pieces_done;
            }
            if (s && (!PyList_Check(s) || PyList_GET_SIZE(s) != np)) {
                PyErr_SetString(PyExc_ValueError, "sizes must have the shape of the buffers");
                goto pieces_done;
            }
            if (s && (sp = PyList_AsTuple(s)) == NULL) goto pieces_done;
            for (Py_ssize_t j = 0; j < np; j++)
                if (takePiece(self, a, i, PyTuple_GET_ITEM(bp, j), sp ? PyTuple_GET_ITEM(sp, j) : NULL, write_into,
                              maxviews) < 0)
                    goto pieces_done;
            rc = 0;
        pieces_done:
            Py_DECREF(bp);
            Py_XDECREF(sp);
            if (rc < 0) goto err_first;
        } else if (takePiece(self, a, i, b, s, write_into, maxviews) < 0) {
            goto err_first;
        }
    }
    /* iovecs were reallocated while growing: point items at them last. */
    for (Py_ssize_t i = 0; bt && i < a->n; i++) {
        a->items[i].iov = a->iov + first[i];
        a->items[i].iovcnt = (int)((i + 1 < a->n ? first[i + 1] : a->niov) - first[i]);
    }
    PyMem_Free(first);
    Py_XDECREF(bt);
    Py_XDECREF(st);
    return 0;
err_first:
    PyMem_Free(first);
err:
    Py_XDECREF(bt);
    Py_XDECREF(st);
    mcpyCallArgsFree(a);
    return -1;
}

PyObject *mcpyResultList(const long long *r, Py_ssize_t n) {
    PyObject *l = PyList_New(n);
    if (l == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(r[i]);
        if (v == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, v);
    }
    return l;
}

/* One number of a range: an int (or what has __index__) that fits 64 bits
 * unsigned. One that does not -- negative, or 2^64 and more -- is not
 * masked into some other address or offset: *refuse is set and the range
 * answers MC_ERR_INVALID alone. Anything else is a TypeError. */
static int rangeNumber(PyObject *o, unsigned long long *v, int *refuse) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "a range is (address, offset, length) of ints, not %.100s",
                         Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    *v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (*v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        *v = 0;
        *refuse = 1;
    }
    return 0;
}

PyObject *mcpyRangeLists(PyObject *ranges, Py_ssize_t n, Py_ssize_t *total, const char *one_per) {
    PyObject *rt = PySequence_Tuple(ranges), *seqs = NULL;
    *total = 0;
    if (rt == NULL) return NULL;
    if (PyTuple_GET_SIZE(rt) != n) {
        PyErr_SetString(PyExc_ValueError, one_per);
        goto err;
    }
    if ((seqs = PyTuple_New(n)) == NULL) goto err;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *seq = PySequence_Tuple(PyTuple_GET_ITEM(rt, i));
        if (seq == NULL) goto err;
        PyTuple_SET_ITEM(seqs, i, seq);
        if (PyTuple_GET_SIZE(seq) > MC_MAX_IOV) {
            PyErr_Format(PyExc_ValueError, "at most %d ranges per item", MC_MAX_IOV);
            goto err;
        }
        *total += PyTuple_GET_SIZE(seq);
    }
    Py_DECREF(rt);
    return seqs;
err:
    Py_DECREF(rt);
    Py_XDECREF(seqs);
    return NULL;
}

int mcpyRangeTriple(PyObject *r, unsigned long long v[3], int *bad) {
    PyObject *t = PySequence_Tuple(r);
    v[0] = v[1] = v[2] = 0;
    if (t != NULL && PyTuple_GET_SIZE(t) != 3) {
        PyErr_SetString(PyExc_TypeError, "a range is (address, offset, length)");
        Py_CLEAR(t);
    }
    if (t == NULL || rangeNumber(PyTuple_GET_ITEM(t, 0), &v[0], bad) < 0 ||
        rangeNumber(PyTuple_GET_ITEM(t, 1), &v[1], bad) < 0 || rangeNumber(PyTuple_GET_ITEM(t, 2), &v[2], bad) < 0) {
        if (t == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "a range is (address, offset, length)");
        }
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}
