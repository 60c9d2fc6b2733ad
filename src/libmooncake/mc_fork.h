/* mc_fork.h -- handles across fork() (mooncake.c, "Fork"). Internal: not
 * installed, and hidden in the shared library like everything not in
 * mooncake.h.
 *
 * The process's fork generation: the same in every thread of a process,
 * one more in each child forked since the library was first used (a
 * pthread_atfork child handler). A handle, and each op and view it gives
 * out, records it when made; one whose number differs from the process's
 * was inherited from the parent, and no call may use it. One load per
 * call: getpid() is a system call in glibc, too dear for every get. */
#ifndef MC_FORK_H
#define MC_FORK_H

extern unsigned mcForkGen;

/* Installs the child handler (once; before the first handle exists). */
void mcForkInstall(void);

static inline unsigned mcForkGenNow(void) { return __atomic_load_n(&mcForkGen, __ATOMIC_RELAXED); }

/* Made in another process (gen was recorded before a fork). */
static inline int mcInherited(unsigned gen) { return gen != mcForkGenNow(); }

/* mc_last_error of an inherited handle. */
#define MC_FORK_ERR                                                                                                 \
    "this handle was created in another process (inherited across fork()): it cannot be used here; "                \
    "make a new one in this process"

#endif
