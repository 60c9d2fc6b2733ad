/* mc_rdma.h -- the RDMA transport of libmooncake (libibverbs, loaded with
 * dlopen at first use: MC_VERBS_LIBRARY names it, default libibverbs.so.1).
 *
 * Built with MC_HAVE_RDMA (BUILD_RDMA=yes, the default when
 * infiniband/verbs.h exists; nothing is linked). Without it, without the
 * library or on a machine with no RDMA device, mcRdmaOpen() fails with a
 * clear reason and the library carries on over shm/tcp.
 *
 * The parts that need no device -- endpoint descriptors, NIC choice by NUMA
 * node, the striping plan of a large transfer -- are plain functions so that
 * they are unit-tested everywhere (tests/c/test_rdma.c). */
#ifndef MC_RDMA_H
#define MC_RDMA_H

#include <stddef.h>
#include <stdint.h>

#define MC_RDMA_MAX_NICS 16

/* One local NIC as the planner sees it. */
typedef struct mcRdmaNic {
    char name[64];      /* ibv device name, e.g. mlx5_0 */
    int numa_node;      /* -1 if unknown */
    int port;           /* 1-based port number */
    int active;         /* port state ACTIVE */
} mcRdmaNic;

/* One piece of a striped transfer. */
typedef struct mcRdmaSlice {
    uint64_t offset;    /* from the start of the transfer */
    uint64_t len;
    int nic;            /* index into the ordered NIC list */
} mcRdmaSlice;

/* A segment's RDMA descriptor: where to connect and, per remote NIC, the
 * rkey of the registered region. Text form (MOUNT ... RKEY): "nic:rkey,..."
 * with rkeys in hex, e.g. "mlx5_0:1a2b,mlx5_1:3c4d"; a bare hex number is
 * one rkey for any NIC. */
typedef struct mcRdmaDesc {
    char host[256];
    int port;
    uint64_t base;
    int nkeys;
    char nic[MC_RDMA_MAX_NICS][64];
    uint32_t rkey[MC_RDMA_MAX_NICS];
} mcRdmaDesc;

/* Parses "rdma://host:port" (IPv6 in brackets) plus base and rkey text;
 * 0 on success, -1 with a reason in err. */
int mcRdmaDescParse(mcRdmaDesc *d, const char *endpoint, uint64_t base, const char *rkeys,
                    char *err, size_t errlen);
/* Writes the RKEY text of d; returns its length or -1 if cap is too small. */
int mcRdmaDescFormatKeys(const mcRdmaDesc *d, char *buf, size_t cap);

/* Orders usable NICs for memory on numa_node: active ports first, the same
 * NUMA node before others, then by name. Fills order[] with indices into
 * nics and returns how many are usable (active). */
int mcRdmaOrderNics(const mcRdmaNic *nics, int n, int numa_node, int *order);

/* Splits a transfer of len bytes over nnics NICs in chunks of at most
 * chunk bytes, round robin, so every NIC carries a near equal share; returns
 * the number of slices written (at most cap), or -1 if cap is too small. */
int mcRdmaStripe(uint64_t len, int nnics, uint64_t chunk, mcRdmaSlice *out, int cap);

/* How a region is registered with the NICs. */
enum { MC_RDMA_REG_NONE = 0, MC_RDMA_REG_HOST, MC_RDMA_REG_DMABUF, MC_RDMA_REG_PEERMEM };

/* GPUDirect for device memory: policy (MC_GPUDIRECT: "auto" or NULL,
 * "dmabuf", "peermem", "off"), whether a dmabuf registration is possible
 * (the GPU exported the range and the verbs library has
 * ibv_reg_dmabuf_mr) and whether peer memory is (nvidia_peermem loaded).
 * Returns MC_RDMA_REG_DMABUF, _PEERMEM or _NONE (staged through host
 * memory). */
int mcRdmaGdrChoose(const char *policy, int dmabuf_ok, int peermem_ok);
/* The dmabuf fd of a CUDA device range (the caller closes it) and addr's
 * offset in it, or -1 with a reason (no driver, no dmabuf support). */
int mcRdmaCudaDmabuf(const void *addr, size_t len, uint64_t *off, char *why, size_t whylen);
/* "host", "dmabuf", "peermem", "staged". */
const char *mcRdmaRegName(int mode);

/* The engine: device context, protection domain, connections per peer. */
typedef struct mcRdma mcRdma;
mcRdma *mcRdmaOpen(char *err, size_t errlen);
void mcRdmaClose(mcRdma *r);
/* Registers [addr, addr+len) on every NIC; writes the RKEY text. MC_OK or MC_ERR_*. */
int mcRdmaRegister(mcRdma *r, void *addr, size_t len, char *rkeys, size_t rkeys_cap);
int mcRdmaUnregister(mcRdma *r, void *addr);
/* Device memory [addr, addr+len): registered the way mcRdmaGdrChoose says
 * (dmabuf_fd/dmabuf_off: the range exported as a dmabuf, -1 if none),
 * falling back to the next way when the NIC refuses. Returns the mode
 * reached (MC_RDMA_REG_NONE: not registered, transfers are staged) and
 * says why in why. */
int mcRdmaRegisterDevice(mcRdma *r, void *addr, size_t len, int dmabuf_fd, uint64_t dmabuf_off,
                         const char *policy, char *rkeys, size_t rkeys_cap, char *why, size_t whylen);
/* The engine's NICs as opened (name, NUMA node, port, active); count. */
int mcRdmaNics(const mcRdma *r, mcRdmaNic *out, int cap);
/* Passive side for a hosted segment: peers exchange QPs over TCP here and
 * each QP lives as long as its connection. */
int mcRdmaListen(mcRdma *r, const char *host, int *port, char *err, size_t errlen);
/* One-sided READ (write=0) or WRITE of len bytes between local (inside a
 * registered region) and desc->base + offset, striped over the NICs, each
 * slice retried once on another NIC. MC_OK or MC_ERR_*. */
int mcRdmaTransfer(mcRdma *r, const mcRdmaDesc *desc, uint64_t offset, void *local, size_t len,
                   int write, char *err, size_t errlen);

#endif
