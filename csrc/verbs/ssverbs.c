/* ssverbs: see ssverbs.h. */
#define _POSIX_C_SOURCE 200809L

#include "ssverbs.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The libibverbs entry points, resolved by ssv_load. The inline verbs of
 * the header (post, poll, notify) go through each device's ops table and
 * need none of these. */
static struct {
	int state; /* 0 not tried, 1 loaded, -1 failed */
	char err[256];
	void *handle;
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	__be64 (*get_device_guid)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t, size_t);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
	int (*destroy_comp_channel)(struct ibv_comp_channel *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
	void (*ack_cq_events)(struct ibv_cq *, unsigned int);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
} lib;

/* sym resolves name into *dst (a function pointer, through memcpy: ISO C
 * has no conversion from void * to a function pointer). */
static int sym(void *dst, size_t size, const char *name, int optional) {
	void *p = dlsym(lib.handle, name);
	if (p == NULL && !optional) {
		snprintf(lib.err, sizeof lib.err, "libibverbs.so.1 lacks %s", name);
		return -1;
	}
	memcpy(dst, &p, size);
	return 0;
}

#define SYM(field, name) sym(&lib.field, sizeof lib.field, name, 0)

int ssv_load(char *err, size_t errlen) {
	if (lib.state == 0) {
		lib.handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
		if (lib.handle == NULL) {
			const char *e = dlerror();
			snprintf(lib.err, sizeof lib.err, "%s", e ? e : "dlopen libibverbs.so.1 failed");
			lib.state = -1;
		} else if (SYM(get_device_list, "ibv_get_device_list") || SYM(free_device_list, "ibv_free_device_list") ||
			   SYM(get_device_name, "ibv_get_device_name") || SYM(get_device_guid, "ibv_get_device_guid") ||
			   SYM(open_device, "ibv_open_device") || SYM(close_device, "ibv_close_device") ||
			   SYM(query_device, "ibv_query_device") || SYM(query_port, "ibv_query_port") ||
			   SYM(query_gid, "ibv_query_gid") ||
			   sym(&lib.query_gid_ex, sizeof lib.query_gid_ex, "_ibv_query_gid_ex", 1) ||
			   SYM(alloc_pd, "ibv_alloc_pd") || SYM(dealloc_pd, "ibv_dealloc_pd") ||
			   SYM(reg_mr, "ibv_reg_mr") || SYM(dereg_mr, "ibv_dereg_mr") ||
			   SYM(create_comp_channel, "ibv_create_comp_channel") ||
			   SYM(destroy_comp_channel, "ibv_destroy_comp_channel") || SYM(create_cq, "ibv_create_cq") ||
			   SYM(destroy_cq, "ibv_destroy_cq") || SYM(get_cq_event, "ibv_get_cq_event") ||
			   SYM(ack_cq_events, "ibv_ack_cq_events") || SYM(create_qp, "ibv_create_qp") ||
			   SYM(destroy_qp, "ibv_destroy_qp") || SYM(modify_qp, "ibv_modify_qp")) {
			dlclose(lib.handle);
			lib.handle = NULL;
			lib.state = -1;
		} else {
			lib.state = 1;
		}
	}
	if (lib.state < 0) {
		snprintf(err, errlen, "%s", lib.err);
		return -1;
	}
	return 0;
}

static int errno_or(int fallback) { return errno != 0 ? errno : fallback; }

int ssv_devices(char *names, uint64_t *guids, int max, int *n) {
	int num = 0;
	errno = 0;
	struct ibv_device **list = lib.get_device_list(&num);
	*n = 0;
	if (list == NULL) {
		return errno_or(ENOSYS);
	}
	for (int i = 0; i < num && i < max; i++) {
		snprintf(names + (size_t)i * SSV_NAME_LEN, SSV_NAME_LEN, "%s", lib.get_device_name(list[i]));
		guids[i] = (uint64_t)lib.get_device_guid(list[i]);
		*n = i + 1;
	}
	lib.free_device_list(list);
	return 0;
}

struct ibv_context *ssv_open(const char *name, int *err) {
	int num = 0;
	errno = 0;
	struct ibv_device **list = lib.get_device_list(&num);
	if (list == NULL) {
		*err = errno_or(ENOSYS);
		return NULL;
	}
	struct ibv_context *ctx = NULL;
	*err = ENODEV;
	for (int i = 0; i < num; i++) {
		if (strcmp(lib.get_device_name(list[i]), name) == 0) {
			errno = 0;
			ctx = lib.open_device(list[i]);
			*err = ctx ? 0 : errno_or(EIO);
			break;
		}
	}
	lib.free_device_list(list);
	return ctx;
}

int ssv_close(struct ibv_context *ctx) { return lib.close_device(ctx) ? errno_or(EIO) : 0; }

int ssv_query_device(struct ibv_context *ctx, struct ssv_device_attr *a) {
	struct ibv_device_attr d;
	memset(&d, 0, sizeof d);
	int rc = lib.query_device(ctx, &d);
	if (rc != 0) {
		return rc > 0 ? rc : errno_or(EIO);
	}
	snprintf(a->fw_ver, sizeof a->fw_ver, "%s", d.fw_ver);
	a->ports = d.phys_port_cnt;
	a->max_qp_wr = d.max_qp_wr;
	a->max_sge = d.max_sge;
	a->max_cqe = d.max_cqe;
	a->max_mr_size = d.max_mr_size;
	return 0;
}

int ssv_query_port(struct ibv_context *ctx, int port, struct ssv_port_attr *a) {
	/* The exported symbol fills the leading, compatible part of
	 * ibv_port_attr, which holds every field read here. */
	struct ibv_port_attr p;
	memset(&p, 0, sizeof p);
	int rc = lib.query_port(ctx, (uint8_t)port, (struct _compat_ibv_port_attr *)(void *)&p);
	if (rc != 0) {
		return rc > 0 ? rc : errno_or(EIO);
	}
	a->state = p.state;
	a->link_layer = p.link_layer;
	a->active_mtu = p.active_mtu;
	a->lid = p.lid;
	a->gid_tbl_len = p.gid_tbl_len;
	return 0;
}

int ssv_query_gid(struct ibv_context *ctx, int port, int index, uint8_t gid[16], int *type) {
	*type = -1;
	if (lib.query_gid_ex != NULL) {
		struct ibv_gid_entry e;
		memset(&e, 0, sizeof e);
		int rc = lib.query_gid_ex(ctx, (uint32_t)port, (uint32_t)index, &e, 0, sizeof e);
		if (rc == 0) {
			memcpy(gid, e.gid.raw, 16);
			*type = (int)e.gid_type;
			return 0;
		}
		if (rc != EOPNOTSUPP && rc != ENOSYS) {
			return rc > 0 ? rc : errno_or(EIO);
		}
	}
	union ibv_gid g;
	if (lib.query_gid(ctx, (uint8_t)port, index, &g) != 0) {
		return errno_or(EIO);
	}
	memcpy(gid, g.raw, 16);
	return 0;
}

struct ibv_pd *ssv_alloc_pd(struct ibv_context *ctx, int *err) {
	errno = 0;
	struct ibv_pd *pd = lib.alloc_pd(ctx);
	*err = pd ? 0 : errno_or(ENOMEM);
	return pd;
}

int ssv_dealloc_pd(struct ibv_pd *pd) {
	int rc = lib.dealloc_pd(pd);
	return rc > 0 ? rc : rc < 0 ? errno_or(EIO) : 0;
}

struct ibv_mr *ssv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, int *err) {
	errno = 0;
	struct ibv_mr *mr = lib.reg_mr(pd, addr, len, access);
	*err = mr ? 0 : errno_or(ENOMEM);
	return mr;
}

int ssv_dereg_mr(struct ibv_mr *mr) {
	int rc = lib.dereg_mr(mr);
	return rc > 0 ? rc : rc < 0 ? errno_or(EIO) : 0;
}

static int nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? errno : 0;
}

struct ssv_cq *ssv_create_cq(struct ibv_context *ctx, int depth, int *err) {
	struct ssv_cq *c = calloc(1, sizeof *c);
	if (c == NULL) {
		*err = ENOMEM;
		return NULL;
	}
	c->wake[0] = c->wake[1] = -1;
	if (pipe(c->wake) != 0) {
		c->wake[0] = c->wake[1] = -1;
		*err = errno_or(EMFILE);
		goto fail;
	}
	if ((*err = nonblock(c->wake[0])) != 0 || (*err = nonblock(c->wake[1])) != 0) {
		goto fail;
	}
	errno = 0;
	if ((c->channel = lib.create_comp_channel(ctx)) == NULL) {
		*err = errno_or(ENOMEM);
		goto fail;
	}
	errno = 0;
	if ((c->cq = lib.create_cq(ctx, depth, NULL, c->channel, 0)) == NULL) {
		*err = errno_or(ENOMEM);
		goto fail;
	}
	*err = 0;
	return c;
fail:
	if (c->channel != NULL) {
		lib.destroy_comp_channel(c->channel);
	}
	if (c->wake[0] >= 0) {
		close(c->wake[0]);
		close(c->wake[1]);
	}
	free(c);
	return NULL;
}

int ssv_destroy_cq(struct ssv_cq *c) {
	if (c->unacked > 0) {
		lib.ack_cq_events(c->cq, c->unacked);
	}
	int rc = lib.destroy_cq(c->cq);
	if (rc != 0) {
		return rc > 0 ? rc : errno_or(EBUSY);
	}
	lib.destroy_comp_channel(c->channel);
	close(c->wake[0]);
	close(c->wake[1]);
	free(c);
	return 0;
}

int ssv_cq_poll(struct ssv_cq *c, struct ssv_wc *out, int n) {
	struct ibv_wc wc[32];
	if (n > 32) {
		n = 32;
	}
	int got = ibv_poll_cq(c->cq, n, wc);
	if (got < 0) {
		return -EIO;
	}
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = (uint32_t)wc[i].status;
		out[i].opcode = (uint32_t)wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

int ssv_cq_arm(struct ssv_cq *c) {
	int rc = ibv_req_notify_cq(c->cq, 0);
	return rc > 0 ? rc : rc < 0 ? EIO : 0;
}

int ssv_cq_wait(struct ssv_cq *c) {
	struct pollfd fds[2] = {{c->channel->fd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
	for (;;) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR) {
				continue;
			}
			return errno;
		}
		if (fds[1].revents != 0) {
			char buf[16];
			while (read(c->wake[0], buf, sizeof buf) > 0) {
			}
			return -1;
		}
		if (fds[0].revents != 0) {
			struct ibv_cq *cq;
			void *cq_ctx;
			if (lib.get_cq_event(c->channel, &cq, &cq_ctx) != 0) {
				return errno_or(EIO);
			}
			/* Acknowledging takes a lock: do it in batches. */
			if (++c->unacked >= 64) {
				lib.ack_cq_events(c->cq, c->unacked);
				c->unacked = 0;
			}
			return 0;
		}
	}
}

int ssv_cq_wake(struct ssv_cq *c) {
	char b = 1;
	if (write(c->wake[1], &b, 1) < 0 && errno != EAGAIN) {
		return errno;
	}
	return 0;
}

struct ibv_qp *ssv_create_qp(struct ibv_pd *pd, struct ssv_cq *cq, int max_send_wr, int max_recv_wr,
			     int max_send_sge, int max_recv_sge, int *err) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq->cq;
	a.recv_cq = cq->cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = (uint32_t)max_send_wr;
	a.cap.max_recv_wr = (uint32_t)max_recv_wr;
	a.cap.max_send_sge = (uint32_t)max_send_sge;
	a.cap.max_recv_sge = (uint32_t)max_recv_sge;
	errno = 0;
	struct ibv_qp *qp = lib.create_qp(pd, &a);
	*err = qp ? 0 : errno_or(ENOMEM);
	return qp;
}

int ssv_destroy_qp(struct ibv_qp *qp) {
	int rc = lib.destroy_qp(qp);
	return rc > 0 ? rc : rc < 0 ? errno_or(EBUSY) : 0;
}

uint32_t ssv_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	errno = 0;
	int rc = lib.modify_qp(qp, a, mask);
	return rc > 0 ? rc : rc < 0 ? errno_or(EINVAL) : 0;
}

int ssv_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = (unsigned int)access;
	return modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int ssv_qp_rtr(struct ibv_qp *qp, const struct ssv_rtr *r) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)r->mtu;
	a.dest_qp_num = r->dest_qpn;
	a.rq_psn = r->rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = (uint8_t)r->min_rnr_timer;
	a.ah_attr.dlid = (uint16_t)r->lid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = (uint8_t)r->port;
	if (r->global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)r->sgid_index;
		a.ah_attr.grh.hop_limit = (uint8_t)r->hop_limit;
	}
	return modify(qp, &a,
		      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int ssv_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry_cnt, int rnr_retry) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = (uint8_t)timeout;
	a.retry_cnt = (uint8_t)retry_cnt;
	a.rnr_retry = (uint8_t)rnr_retry;
	a.max_rd_atomic = 1;
	return modify(qp, &a,
		      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			      IBV_QP_MAX_QP_RD_ATOMIC);
}

int ssv_qp_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return modify(qp, &a, IBV_QP_STATE);
}

int ssv_post_send(struct ibv_qp *qp, const struct ssv_send_wr *w) {
	static const enum ibv_wr_opcode ops[] = {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
						 IBV_WR_RDMA_WRITE_WITH_IMM};
	if (w->opcode > SSV_WRITE_IMM || w->num_sge < 0 || w->num_sge > SSV_MAX_SGE) {
		return EINVAL;
	}
	struct ibv_sge sge[SSV_MAX_SGE];
	for (int i = 0; i < w->num_sge; i++) {
		sge[i].addr = w->sge[i].addr;
		sge[i].length = w->sge[i].len;
		sge[i].lkey = w->sge[i].lkey;
	}
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = w->wr_id;
	wr.sg_list = sge;
	wr.num_sge = w->num_sge;
	wr.opcode = ops[w->opcode];
	wr.send_flags = w->signaled ? IBV_SEND_SIGNALED : 0;
	if (w->opcode == SSV_SEND_IMM || w->opcode == SSV_WRITE_IMM) {
		wr.imm_data = htonl(w->imm);
	}
	if (w->opcode == SSV_WRITE || w->opcode == SSV_WRITE_IMM) {
		wr.wr.rdma.remote_addr = w->remote_addr;
		wr.wr.rdma.rkey = w->rkey;
	}
	int rc = ibv_post_send(qp, &wr, &bad);
	return rc > 0 ? rc : rc < 0 ? EIO : 0;
}

int ssv_post_recv(struct ibv_qp *qp, uint64_t wr_id, const struct ssv_sge *s) {
	struct ibv_sge sge = {s->addr, s->len, s->lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	int rc = ibv_post_recv(qp, &wr, &bad);
	return rc > 0 ? rc : rc < 0 ? EIO : 0;
}
