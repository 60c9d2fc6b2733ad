/* _mooncake_async.c -- non-blocking batches: Client.put_async and
 * get_async hand their batch to libmooncake's worker
 * (mc_batch_put_async / mc_batch_get_async) and answer an Op, the object
 * that waits for it.
 *
 * An Op owns its call's arguments (callArgs: the key tuple and every
 * buffer taken with the buffer protocol) until the library's op is freed
 * -- by release() or by the garbage collector, both of which wait for it
 * first -- so no bytearray is resized, and no key freed, while the worker
 * moves their bytes. It borrows no handle from the pool: the op is hung on
 * the first handle, and runs on the worker's connections. fileno() makes
 * it usable from an event loop. mcpySubmit is the one entry point (from
 * _mooncake.c's put_async and get_async); mcpyOpType is added to the
 * module as Op.
 */
#include "_mooncake.h"

#include <string.h>

/* One Op may be waited on by several threads (a Future shared between
 * them), and released by one while others still wait: mc_op_free must come
 * after every other call on the op has returned, and the item codes read
 * after the wait must still be there. So the calls that wait without the
 * GIL count themselves in `waiting` (changed only with the GIL held), and
 * release() with waiters only marks the op released: the last waiter out
 * frees it. A call that finds it released answers ValueError. */
typedef struct {
    PyObject_HEAD
    mc_op *op;
    callArgs args; /* the buffers stay taken until the op is freed */
    Py_ssize_t n;
    int put;
    int waiting;   /* calls inside mc_op_wait without the GIL */
    int released;  /* release() was called: no new call may start */
} OpObject;

static void Op_free(OpObject *self) {
    if (self->op) {
        mc_op *op = self->op;
        self->op = NULL;
        Py_BEGIN_ALLOW_THREADS
        mc_op_free(op); /* waits for it: the buffers below are in use until then */
        Py_END_ALLOW_THREADS
    }
    mcpyCallArgsFree(&self->args);
}

static void Op_release(OpObject *self) {
    if (self->released) return; /* a second release() must not free the buffers under the first's wait */
    self->released = 1;
    if (self->waiting == 0) Op_free(self);
}

/* NULL with ValueError once released; else the op, counted as waited on
 * until opLeave. */
static mc_op *opEnter(OpObject *self) {
    if (self->released || self->op == NULL) {
        PyErr_SetString(PyExc_ValueError, "the operation was released");
        return NULL;
    }
    self->waiting++;
    return self->op;
}

static void opLeave(OpObject *self) {
    if (--self->waiting == 0 && self->released) Op_free(self);
}

static void Op_dealloc(OpObject *self) {
    Op_free(self); /* no call is waiting: each holds a reference */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Op_done(OpObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->released || self->op == NULL || mc_op_done(self->op));
}

static PyObject *Op_fileno(OpObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->released || self->op == NULL) {
        PyErr_SetString(PyExc_ValueError, "the operation was released");
        return NULL;
    }
    return PyLong_FromLong(mc_op_fd(self->op));
}

/* wait(timeout_ms=-1) -> the batch's return value, or MC_ERR_PENDING. */
static PyObject *Op_wait(OpObject *self, PyObject *args) {
    int ms = -1, rc;
    if (!PyArg_ParseTuple(args, "|i", &ms)) return NULL;
    mc_op *op = opEnter(self);
    if (op == NULL) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_op_wait(op, ms);
    Py_END_ALLOW_THREADS
    opLeave(self);
    return PyLong_FromLong(rc);
}

/* results() -> [per item]; waits first. Items refused before submission
 * (bad addresses) keep their code. */
static PyObject *Op_results(OpObject *self, PyObject *Py_UNUSED(ignored)) {
    mc_op *op = opEnter(self);
    if (op == NULL) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_op_wait(op, -1);
    Py_END_ALLOW_THREADS
    /* Still counted in `waiting`: a release() meanwhile freed nothing. */
    const long long *r = mc_op_results(op);
    long long *out = PyMem_Calloc((size_t)self->n + 1, sizeof(*out));
    PyObject *l = NULL;
    if (out == NULL) {
        PyErr_NoMemory();
    } else {
        for (Py_ssize_t i = 0, j = 0; i < self->n; i++) {
            if (self->args.item_err[i]) out[i] = self->args.item_err[i];
            else if (r == NULL) out[i] = rc < 0 ? rc : MC_ERR_PROTOCOL; /* finished without results */
            else out[i] = r[j++];
        }
        l = mcpyResultList(out, self->n);
        PyMem_Free(out);
    }
    opLeave(self);
    return l;
}

/* error() -> why the finished op failed, as a whole or in some items (its
 * last failed item's reason); "" when nothing failed or while it runs. */
static PyObject *Op_error(OpObject *self, PyObject *Py_UNUSED(ignored)) {
    mc_op *op = opEnter(self);
    if (op == NULL) return NULL;
    const char *e = mc_op_error(op);
    PyObject *s = PyUnicode_DecodeUTF8(e ? e : "", e ? (Py_ssize_t)strlen(e) : 0, "replace");
    opLeave(self);
    return s;
}

/* release(): wait, then give the buffers back now rather than at GC. */
static PyObject *Op_release_m(OpObject *self, PyObject *Py_UNUSED(ignored)) {
    Op_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Op_methods[] = {
    {"done", (PyCFunction)Op_done, METH_NOARGS, "True once the batch has finished."},
    {"fileno", (PyCFunction)Op_fileno, METH_NOARGS, "A descriptor readable once finished (for event loops)."},
    {"wait", (PyCFunction)Op_wait, METH_VARARGS, "wait(timeout_ms=-1) -> batch result or MC_ERR_PENDING."},
    {"results", (PyCFunction)Op_results, METH_NOARGS, "Per-item results (waits first)."},
    {"error", (PyCFunction)Op_error, METH_NOARGS, "Why the finished op (or its last failed item) failed, or ''."},
    {"release", (PyCFunction)Op_release_m, METH_NOARGS, "Wait, then release the buffers."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpyOpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._mooncake.Op",
    .tp_basicsize = sizeof(OpObject),
    .tp_dealloc = (destructor)Op_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch running in the background (Client.put_async / get_async).",
    .tp_methods = Op_methods,
};

/* The op runs on the library's worker with its own connections: it needs
 * no handle from the pool, only the first one to hang it on. Items refused
 * here keep their code and are left out. */
PyObject *mcpySubmit(ClientObject *self, PyObject *keys, PyObject *bufs, PyObject *sizes, PyObject *optsObj,
                     int put) {
    mc_put_opts opts;
    if (put && mcpyParseOpts(optsObj, &opts) < 0) return NULL;
    OpObject *op = PyObject_New(OpObject, &mcpyOpType);
    if (op == NULL) return NULL;
    op->op = NULL;
    op->waiting = op->released = 0;
    memset(&op->args, 0, sizeof(op->args));
    op->put = put;
    if (mcpyParseCall(self, &op->args, keys, bufs, sizes, !put) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    op->n = op->args.n;
    callArgs *a = &op->args;
    mc_kvv *sub = PyMem_Calloc((size_t)a->n + 1, sizeof(*sub));
    if (sub == NULL) {
        Py_DECREF(op);
        return PyErr_NoMemory();
    }
    size_t m = 0;
    for (Py_ssize_t i = 0; i < a->n; i++)
        if (!a->item_err[i]) sub[m++] = a->items[i];
    if (m == 0) { /* nothing to run: the results are known now */
        PyMem_Free(sub);
        PyObject *l = mcpyResultList(a->item_err, a->n);
        Py_DECREF(op);
        return l;
    }
    mc_op *o = NULL;
    int closed = 0;
    if (mcpyInherited(self)) {
        PyMem_Free(sub);
        Py_DECREF(op);
        return PyLong_FromLong(MC_ERR_INVALID);
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->closed || self->nall == 0) {
        closed = 1;
    } else {
        mc_client *h = self->all[0];
        o = put ? mc_batch_put_async(h, m, sub, &opts) : mc_batch_get_async(h, m, sub);
        if (o == NULL) mcpySetTlsErr(mc_last_error(h));
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    PyMem_Free(sub);
    if (o == NULL) {
        Py_DECREF(op);
        if (closed) mcpySetTlsErr("the store is closed");
        return PyLong_FromLong(closed ? BINDING_ERR_CLOSED : MC_ERR_IO);
    }
    op->op = o;
    return (PyObject *)op;
}
