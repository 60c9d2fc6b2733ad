/* fakeverbs.h -- what tests read and set of build/tests/libfakeverbs.so.
 *
 * The fake is loaded by libmooncake through MC_VERBS_LIBRARY (dlopen); a
 * test reaches the same copy with dlopen of the same path and dlsym of the
 * two names below. Counters and knobs live in the registry file that every
 * process using the fake shares (FAKEVERBS_REGISTRY), so a counter read in
 * one process counts the operations of all of them.
 *
 * Environment, read when the library loads:
 *   FAKEVERBS_REGISTRY  the shared registry file (default
 *                       /dev/shm/fakeverbs-<uid>); <file>.sys/ holds the
 *                       devices' sysfs-like directories (ibdev_path)
 *   FAKEVERBS_DEVICES   name:numa[:down],...  (default fakenic0:0,fakenic1:0)
 *   FAKEVERBS_LINK      eth (RoCE, addressed by GID; default) or ib (LID)
 *   FAKEVERBS_DMABUF    0: ibv_reg_dmabuf_mr fails with EOPNOTSUPP (default 1)
 *   FAKEVERBS_QP_ERR_AFTER  as the knob qp_err_after
 *
 * Counters (fakeverbs_get): read_ops write_ops read_bytes write_bytes
 *   rem_access_err loc_prot_err retry_exc_err flush_err qp_refused
 *   dmabuf_mrs mrs qps dev0_ops .. dev15_ops (created minus destroyed for
 *   mrs, qps, dmabuf_mrs: a process that died without freeing still counts)
 *   live_qps live_mrs: those of the registry whose process is alive
 * Knobs (fakeverbs_set, fakeverbs_get):
 *   qp_err_after  N >= 0: N more operations succeed, then the QP running
 *                 the next one goes to the error state (that one completes
 *                 with IBV_WC_RETRY_EXC_ERR, what follows flushes); fires
 *                 once and returns to -1 (off)
 *   dev_fail      bit mask of device indices whose every operation fails
 *                 as above (a NIC whose link went away)
 *   dmabuf        1/0: ibv_reg_dmabuf_mr supported
 *   reset         any value: every counter back to 0 */
#ifndef FAKEVERBS_H
#define FAKEVERBS_H

long long fakeverbs_get(const char *name);
int fakeverbs_set(const char *name, long long value);

#endif
