/*
 * ssverbs: a thin C99 layer over libibverbs for softsync's verbs transport.
 *
 * libibverbs is loaded at run time (dlopen of libibverbs.so.1), never
 * linked: a binary built with verbs support starts on hosts without the
 * library and reports the transport as unsupported. Only the headers of
 * libibverbs-dev are needed to build. The fast-path verbs (post, poll,
 * notify) are the header's inline calls through the device's ops table.
 *
 * Every function returns 0 or a positive errno value (never aborts); those
 * that create an object return it, or NULL with *err set. Work requests
 * and completions are flattened into plain structs (no unions), with
 * immediate data in host byte order.
 */
#ifndef SSVERBS_H
#define SSVERBS_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ssv_load loads libibverbs once (later calls return the first result).
 * On failure it returns non-zero and writes the reason to err. */
int ssv_load(char *err, size_t errlen);

/* ssv_devices lists up to max devices into names (max × 64 bytes) and
 * guids and sets *n. If libibverbs cannot list devices at all
 * (ibv_get_device_list returned NULL: no kernel support) it returns the
 * errno it left, ENOSYS if none. */
#define SSV_NAME_LEN 64
int ssv_devices(char *names, uint64_t *guids, int max, int *n);

struct ssv_device_attr {
	char fw_ver[64];
	int ports;
	int max_qp_wr;
	int max_sge;
	int max_cqe;
	uint64_t max_mr_size;
};

struct ssv_port_attr {
	int state;
	int link_layer;
	int active_mtu;
	int lid;
	int gid_tbl_len;
};

struct ibv_context *ssv_open(const char *name, int *err);
int ssv_close(struct ibv_context *ctx);
int ssv_query_device(struct ibv_context *ctx, struct ssv_device_attr *a);
int ssv_query_port(struct ibv_context *ctx, int port, struct ssv_port_attr *a);
/* *type is enum ibv_gid_type, or -1 when the library cannot tell. */
int ssv_query_gid(struct ibv_context *ctx, int port, int index, uint8_t gid[16], int *type);

struct ibv_pd *ssv_alloc_pd(struct ibv_context *ctx, int *err);
int ssv_dealloc_pd(struct ibv_pd *pd);

struct ibv_mr *ssv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, int *err);
int ssv_dereg_mr(struct ibv_mr *mr);

/* A completion queue with its own completion channel and a wake-up pipe,
 * so that a thread blocked in ssv_cq_wait can be released. */
struct ssv_cq {
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq;
	int wake[2];
	unsigned int unacked;
};

struct ssv_cq *ssv_create_cq(struct ibv_context *ctx, int depth, int *err);
int ssv_destroy_cq(struct ssv_cq *cq);

struct ssv_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode; /* enum ibv_wc_opcode */
	uint32_t byte_len;
	uint32_t imm; /* host byte order */
	uint32_t has_imm;
	uint32_t qp_num;
	uint32_t vendor_err;
};

/* ssv_cq_poll returns how many completions it stored (≥ 0) or -errno. */
int ssv_cq_poll(struct ssv_cq *cq, struct ssv_wc *wc, int n);
int ssv_cq_arm(struct ssv_cq *cq);
/* ssv_cq_wait blocks until a completion event (returns 0, the event
 * acknowledged) or ssv_cq_wake (returns -1), or fails (errno). */
int ssv_cq_wait(struct ssv_cq *cq);
int ssv_cq_wake(struct ssv_cq *cq);

struct ibv_qp *ssv_create_qp(struct ibv_pd *pd, struct ssv_cq *cq, int max_send_wr, int max_recv_wr,
			     int max_send_sge, int max_recv_sge, int *err);
int ssv_destroy_qp(struct ibv_qp *qp);
uint32_t ssv_qp_num(struct ibv_qp *qp);
int ssv_qp_init(struct ibv_qp *qp, int port, int access);

struct ssv_rtr {
	int port;
	int mtu;
	uint32_t dest_qpn;
	uint32_t rq_psn;
	int lid;
	int global;
	uint8_t gid[16];
	int sgid_index;
	int hop_limit;
	int min_rnr_timer;
};
int ssv_qp_rtr(struct ibv_qp *qp, const struct ssv_rtr *a);
int ssv_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry_cnt, int rnr_retry);
int ssv_qp_error(struct ibv_qp *qp);

#define SSV_MAX_SGE 3
enum { SSV_SEND, SSV_SEND_IMM, SSV_WRITE, SSV_WRITE_IMM };

struct ssv_sge {
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
};

struct ssv_send_wr {
	uint64_t wr_id;
	uint32_t opcode; /* SSV_SEND ... */
	uint32_t signaled;
	uint32_t imm; /* host byte order */
	uint32_t rkey;
	uint64_t remote_addr;
	int num_sge;
	struct ssv_sge sge[SSV_MAX_SGE];
};

int ssv_post_send(struct ibv_qp *qp, const struct ssv_send_wr *wr);
int ssv_post_recv(struct ibv_qp *qp, uint64_t wr_id, const struct ssv_sge *sge);

#ifdef __cplusplus
}
#endif

#endif
