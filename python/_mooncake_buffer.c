/* _mooncake_buffer.c -- the Buffer type (mooncake.store.BufferHandle):
 * memory handed to Python with the buffer protocol, get_buffer's handle
 * and Client.views' window onto a stored object.
 *
 * A type apart from the Client: it knows no handles and no calls. It owns
 * its memory, or borrows an owner's, or holds a libmooncake view (released
 * with it), so it lives as long as Python keeps it, whatever call made it.
 * _mooncake.c uses two things of it: mcpyBufferOfView, for views(), and
 * mcpyBufferType, added to the module as Buffer.
 */
#include "_mooncake.h"

#include <stddef.h>
#include <stdint.h>

/* Memory of its own with the buffer protocol, for Mooncake's get_buffer:
 * the engines read it through memoryview / numpy.frombuffer /
 * torch.frombuffer and by address (ptr()). Written in C because a Python
 * object can only lend its memory through the buffer protocol from C (a
 * bytearray would do, but cannot be kept from resizing -- moving the
 * address it handed out -- without a reference cycle that delays its
 * release to the garbage collector). Weak references let the Python layer
 * know when it is gone.
 *
 * The type is public (mooncake.store.BufferHandle) and can be called from
 * any Python code, so what it is given is checked like any other
 * argument: fresh memory is zeroed (never another object's old bytes),
 * and a window must lie inside its owner's buffer, which it holds
 * exported for its whole life (the owner cannot be resized or unmapped
 * under it) and is read-only when the owner's is. */
typedef struct {
    PyObject_HEAD
    char *mem;
    Py_ssize_t len;
    int has_owner;     /* a window on owner's memory (an arena), else ours */
    int readonly;      /* the owner's buffer is */
    Py_buffer owner;   /* held while the window lives */
    PyObject *weakrefs;
    mc_view *view;     /* a view of a stored object (read-only), released with the handle */
} BufferObject;

/* A handle onto a stored object where it lies (Client.views). Read-only
 * through the buffer protocol: writing would change the stored object under
 * every other reader (a writable copy is bytes(handle) or numpy.array).
 * Its bytes are the library's answer each time they are asked for, not an
 * address kept from its making: in a child forked after it was made the
 * hold that keeps them the object's is the parent's, and the library gives
 * such a view no data (mc_view_data NULL, size 0), so neither does the
 * handle (BufferError, saying why). */
PyObject *mcpyBufferOfView(mc_view *v) {
    BufferObject *self = (BufferObject *)mcpyBufferType.tp_alloc(&mcpyBufferType, 0);
    if (self == NULL) {
        mc_view_release(v);
        return NULL;
    }
    self->view = v;
    return (PyObject *)self;
}

/* Buffer(size) owns fresh memory; Buffer(size, owner, address) is a window
 * on memory an owner keeps alive -- the store's local buffer, carved by the
 * Python layer, which takes the window back when the handle goes (weak
 * reference): pre-faulted, registered memory instead of a fresh allocation
 * whose pages are faulted in by every get. The window is checked against
 * the owner's buffer: a wrong address is a ValueError, not a handle onto
 * memory no one owns. */
static PyObject *Buffer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t len;
    PyObject *owner = NULL;
    unsigned long long addr = 0;
    static char *kw[] = {"size", "owner", "address", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|OK", kw, &len, &owner, &addr)) return NULL;
    if (len < 0) {
        PyErr_SetString(PyExc_ValueError, "a buffer size cannot be negative");
        return NULL;
    }
    if (owner && owner != Py_None && addr == 0 && len) {
        PyErr_SetString(PyExc_ValueError, "a window on an owner's memory needs its address");
        return NULL;
    }
    BufferObject *self = (BufferObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->len = len;
    if (owner && owner != Py_None) {
        if (PyObject_GetBuffer(owner, &self->owner, PyBUF_SIMPLE) != 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->has_owner = 1;
        self->readonly = self->owner.readonly;
        uintptr_t lo = (uintptr_t)self->owner.buf, a = (uintptr_t)addr;
        if (len && (a < lo || a - lo > (uintptr_t)self->owner.len || (uintptr_t)len > (uintptr_t)self->owner.len - (a - lo))) {
            PyErr_Format(PyExc_ValueError, "a window of %zd bytes at %p is not inside its owner's %zd bytes", len,
                         (void *)a, self->owner.len);
            Py_DECREF(self);
            return NULL;
        }
        self->mem = (char *)a;
    } else if (len && (self->mem = PyMem_RawCalloc(1, (size_t)len)) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void Buffer_dealloc(BufferObject *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->view) mc_view_release(self->view); /* queued: no I/O here */
    else if (self->has_owner) PyBuffer_Release(&self->owner);
    else PyMem_RawFree(self->mem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The bytes now: a view's are NULL and 0 in a forked child (see above). */
static char *bufferMem(BufferObject *self) { return self->view ? (char *)mc_view_data(self->view) : self->mem; }
static Py_ssize_t bufferLen(BufferObject *self) {
    return self->view ? (Py_ssize_t)mc_view_size(self->view) : self->len;
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
    static char empty[1];
    char *mem = bufferMem(self);
    if (self->view && mem == NULL) {
        PyErr_SetString(PyExc_BufferError, "this view of a stored object was made in another process (inherited "
                                           "across fork()): its bytes are not held for this one; get it again from a store made here");
        view->obj = NULL;
        return -1;
    }
    return PyBuffer_FillInfo(view, (PyObject *)self, mem ? mem : empty, bufferLen(self),
                             self->view != NULL || self->readonly, flags);
}

static Py_ssize_t Buffer_length(BufferObject *self) { return bufferLen(self); }

static PyObject *Buffer_ptr(BufferObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromVoidPtr(bufferMem(self));
}

static PyObject *Buffer_size(BufferObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(bufferLen(self));
}

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, NULL};
static PySequenceMethods Buffer_as_sequence = {.sq_length = (lenfunc)Buffer_length};
static PyMethodDef Buffer_methods[] = {
    {"ptr", (PyCFunction)Buffer_ptr, METH_NOARGS, "The address of the bytes (0 when empty)."},
    {"size", (PyCFunction)Buffer_size, METH_NOARGS, "The number of bytes."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpyBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.BufferHandle",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_as_sequence = &Buffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Buffer(size[, owner, address]): zeroed bytes of its own, or a window inside owner's buffer, with the buffer protocol, ptr() and size() (get_buffer's handle).",
    .tp_weaklistoffset = offsetof(BufferObject, weakrefs),
    .tp_methods = Buffer_methods,
    .tp_new = Buffer_new,
};
