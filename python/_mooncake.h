/* _mooncake.h -- what the files of the extension mooncake._mooncake share:
 * _mooncake.c (the module and the Client type), _mooncake_args.c (a call's
 * keys, options and buffers), _mooncake_buffer.c (the Buffer type) and
 * _mooncake_async.c (the Op type).
 *
 * One extension cut along its sections, not layers with interfaces of their
 * own: the structs below are read by all of them (the Client's lock and
 * registrations by the argument checks and by the ops), and what one file
 * calls of another is declared here, prefixed mcpy; everything else is
 * static to its file. Internal, not installed, and hidden in the shared
 * object: it exports PyInit__mooncake alone, as it did when it was one file.
 */
#ifndef MCPY_MOONCAKE_H
#define MCPY_MOONCAKE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake.h"

#define BINDING_ERR_CLOSED (-100)
#define POOL_MAX 64 /* handles one Client opens at most; more threads wait for one */

#pragma GCC visibility push(hidden)

/* ---- the Client (_mooncake.c) -------------------------------------------- */

/* One register() of the Client's, replayed on every handle it opens. */
typedef struct {
    uintptr_t addr;
    size_t len;
    int mem;      /* MC_MEM_HOST or MC_MEM_CUDA */
    int writable; /* host memory mapped writable throughout */
    int refs;     /* register() calls at this address not yet undone */
} regionT;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* a handle came back / the last call ended */
    char *uri, *user, *password;
    int connect_ms, io_ms, transport, streams, lease_release; /* -1: library default */
    mc_client *all[POOL_MAX];
    int nall;
    mc_client *idle[POOL_MAX];
    int nidle;
    int busy;                    /* handles lent out, and opens in progress */
    int closed;
    regionT *regions;
    int nregions;
    int inited;
    mc_client *sess_h;           /* the handle put sessions run on (_mooncake_session.c), NULL before the first */
    unsigned fork_gen;           /* mcpyForkGen when made: another value means inherited across fork() */
} ClientObject;

/* The process's fork generation (_mooncake.c: one more in each child,
 * by a pthread_atfork handler installed at import). */
extern unsigned mcpyForkGen;

/* A Client inherited across fork(): 1 with this thread's error words set
 * (every call then answers MC_ERR_INVALID; see _mooncake.c, "Fork"). Its
 * lock is not taken: a thread of the parent may have held it at the fork. */
int mcpyInherited(ClientObject *self);

/* This thread's last failure in words (last_error()), set by every file. */
extern __thread char mcpyTlsErr[512];
void mcpySetTlsErr(const char *msg);

/* ---- a call's arguments (_mooncake_args.c) ------------------------------- */

/* Everything one call holds: the key tuple, the buffers taken, the iovecs. */
typedef struct {
    PyObject *keys;     /* tuple */
    Py_ssize_t n;
    mc_kvv *items;
    struct iovec *iov;  /* all items' pieces, item i's from items[i].iov */
    Py_ssize_t niov, capiov;
    Py_buffer *views;
    Py_ssize_t nviews;
    long long *item_err; /* per item: 0, or the code it failed with before any I/O */
} callArgs;

int mcpyKeyBytes(PyObject *o, const char **p, Py_ssize_t *n);
int mcpyParseOpts(PyObject *o, mc_put_opts *opts);
int mcpyParseCall(ClientObject *self, callArgs *a, PyObject *keys, PyObject *bufs, PyObject *sizes, int write_into);
void mcpyCallArgsFree(callArgs *a);
int mcpyAddressAllowed(ClientObject *self, uintptr_t p, size_t len, int write_into);
PyObject *mcpyResultList(const long long *r, Py_ssize_t n);
/* Per item a list of (a, b, c) ranges (get_ranges, put_session_write): each
 * item's list copied into a tuple first, so that a sequence whose len()
 * disagrees with what it yields cannot size one array and fill another.
 * The tuple of n tuples and *total ranges, or NULL with an exception
 * (ValueError one_per when there are not n lists, or more than
 * MC_MAX_IOV in one). */
PyObject *mcpyRangeLists(PyObject *ranges, Py_ssize_t n, Py_ssize_t *total, const char *one_per);
/* A range's three numbers: 0, or -1 with TypeError. A number that does not
 * fit 64 bits unsigned sets *bad (the range is refused alone), never
 * masked into another. */
int mcpyRangeTriple(PyObject *r, unsigned long long v[3], int *bad);

/* ---- the pool (_mooncake.c) and put sessions (_mooncake_session.c) ----- */

mc_client *mcpyBorrow(ClientObject *self, int *rc); /* with the GIL; NULL and *rc on failure */
PyObject *mcpyPutSessionStart(ClientObject *self, PyObject *args);
PyObject *mcpyPutSessionWrite(ClientObject *self, PyObject *args);
PyObject *mcpyPutSessionEnd(ClientObject *self, PyObject *args);
PyObject *mcpyPutSessionRevoke(ClientObject *self, PyObject *args);

/* ---- the Buffer type (_mooncake_buffer.c) -------------------------------- */

extern PyTypeObject mcpyBufferType;
PyObject *mcpyBufferOfView(mc_view *v);

/* ---- the Op type: non-blocking batches (_mooncake_async.c) --------------- */

extern PyTypeObject mcpyOpType;
PyObject *mcpySubmit(ClientObject *self, PyObject *keys, PyObject *bufs, PyObject *sizes, PyObject *optsObj, int put);

#pragma GCC visibility pop

#endif
