/* Tests of the ssverbs layer. Without libibverbs.so.1 the test is skipped
 * (exit 77). Without RDMA devices (no kernel support, or an empty list)
 * it checks that every entry point reports that as an error value. With
 * a device it opens each, queries its ports and, on the first active one,
 * sends a message between two connected queue pairs and waits for its
 * completion through the completion channel. */
#define _POSIX_C_SOURCE 200809L

#include "ssverbs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                                                       \
	do {                                                                                                   \
		if (!(cond)) {                                                                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
			fprintf(stderr, __VA_ARGS__);                                                          \
			fprintf(stderr, "\n");                                                                 \
			failures++;                                                                            \
		}                                                                                              \
	} while (0)

/* loopback sends one message between two queue pairs on port. */
static void loopback(struct ibv_context *ctx, int port, const struct ssv_port_attr *pa) {
	int err = 0;
	struct ibv_pd *pd = ssv_alloc_pd(ctx, &err);
	CHECK(pd != NULL, "ssv_alloc_pd: %s", strerror(err));
	if (pd == NULL) {
		return;
	}
	char *buf = NULL;
	CHECK(posix_memalign((void **)&buf, 4096, 8192) == 0, "posix_memalign");
	memset(buf, 0, 8192);
	strcpy(buf, "ping over RDMA");
	struct ibv_mr *mr = ssv_reg_mr(pd, buf, 8192, 1 | 2, &err);
	CHECK(mr != NULL, "ssv_reg_mr: %s (is the locked-memory limit, ulimit -l, too low?)", strerror(err));
	struct ssv_cq *cq = ssv_create_cq(ctx, 16, &err);
	CHECK(cq != NULL, "ssv_create_cq: %s", strerror(err));
	struct ibv_qp *qa = NULL, *qb = NULL;
	if (mr != NULL && cq != NULL) {
		qa = ssv_create_qp(pd, cq, 4, 4, 3, 1, &err);
		CHECK(qa != NULL, "ssv_create_qp: %s", strerror(err));
		qb = ssv_create_qp(pd, cq, 4, 4, 3, 1, &err);
		CHECK(qb != NULL, "ssv_create_qp: %s", strerror(err));
	}
	if (qa != NULL && qb != NULL) {
		struct ssv_rtr r;
		memset(&r, 0, sizeof r);
		r.port = port;
		r.mtu = pa->active_mtu;
		r.lid = pa->lid;
		r.hop_limit = 1;
		r.min_rnr_timer = 12;
		if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
			int type = -1;
			r.global = 1;
			for (int i = 0; i < pa->gid_tbl_len; i++) {
				if (ssv_query_gid(ctx, port, i, r.gid, &type) == 0 && (type == IBV_GID_TYPE_ROCE_V2 || type < 0)) {
					r.sgid_index = i;
					break;
				}
			}
		}
		struct ibv_qp *qs[2] = {qa, qb};
		for (int i = 0; i < 2; i++) {
			CHECK(ssv_qp_init(qs[i], port, 1 | 2) == 0, "ssv_qp_init");
		}
		struct ssv_sge rs = {(uint64_t)(uintptr_t)(buf + 4096), 4096, mr->lkey};
		CHECK(ssv_post_recv(qb, 42, &rs) == 0, "ssv_post_recv");
		for (int i = 0; i < 2; i++) {
			r.dest_qpn = ssv_qp_num(qs[1 - i]);
			CHECK(ssv_qp_rtr(qs[i], &r) == 0, "ssv_qp_rtr");
			CHECK(ssv_qp_rts(qs[i], 0, 14, 7, 7) == 0, "ssv_qp_rts");
		}
		CHECK(ssv_cq_arm(cq) == 0, "ssv_cq_arm");
		struct ssv_send_wr w;
		memset(&w, 0, sizeof w);
		w.wr_id = 7;
		w.opcode = SSV_SEND_IMM;
		w.signaled = 1;
		w.imm = 0x01020304;
		w.num_sge = 1;
		w.sge[0].addr = (uint64_t)(uintptr_t)buf;
		w.sge[0].len = 15;
		w.sge[0].lkey = mr->lkey;
		CHECK(ssv_post_send(qa, &w) == 0, "ssv_post_send");
		int seen = 0;
		for (int spins = 0; seen < 2 && spins < 100; spins++) {
			struct ssv_wc wc[4];
			int n = ssv_cq_poll(cq, wc, 4);
			CHECK(n >= 0, "ssv_cq_poll: %d", n);
			for (int i = 0; i < n; i++) {
				CHECK(wc[i].status == 0, "completion %llu: status %u", (unsigned long long)wc[i].wr_id, wc[i].status);
				if (wc[i].wr_id == 42) {
					CHECK(wc[i].byte_len == 15 && wc[i].has_imm && wc[i].imm == 0x01020304,
					      "receive: %u bytes, imm %#x", wc[i].byte_len, wc[i].imm);
				}
				seen++;
			}
			if (seen < 2 && n <= 0) {
				CHECK(ssv_cq_wait(cq) == 0, "ssv_cq_wait");
				CHECK(ssv_cq_arm(cq) == 0, "ssv_cq_arm");
			}
		}
		CHECK(seen == 2, "%d of 2 completions", seen);
		CHECK(strcmp(buf + 4096, "ping over RDMA") == 0, "received %.15s", buf + 4096);
	}
	if (cq != NULL) {
		CHECK(ssv_cq_wake(cq) == 0, "ssv_cq_wake");
		CHECK(ssv_cq_wait(cq) == -1, "ssv_cq_wait after ssv_cq_wake");
	}
	if (qa != NULL) {
		CHECK(ssv_qp_error(qa) == 0, "ssv_qp_error");
		CHECK(ssv_destroy_qp(qa) == 0, "ssv_destroy_qp");
	}
	if (qb != NULL) {
		CHECK(ssv_destroy_qp(qb) == 0, "ssv_destroy_qp");
	}
	if (cq != NULL) {
		CHECK(ssv_destroy_cq(cq) == 0, "ssv_destroy_cq");
	}
	if (mr != NULL) {
		CHECK(ssv_dereg_mr(mr) == 0, "ssv_dereg_mr");
	}
	CHECK(ssv_dealloc_pd(pd) == 0, "ssv_dealloc_pd");
	free(buf);
}

int main(void) {
	char err[256];
	if (ssv_load(err, sizeof err) != 0) {
		printf("skip: %s\n", err);
		return 77;
	}
	CHECK(ssv_load(err, sizeof err) == 0, "second ssv_load");

	char names[8 * SSV_NAME_LEN];
	uint64_t guids[8];
	int n = -1;
	int rc = ssv_devices(names, guids, 8, &n);
	if (rc != 0) {
		printf("no RDMA support in this kernel: ibv_get_device_list: %s\n", strerror(rc));
		CHECK(n == 0, "device count %d after a failed listing", n);
	} else {
		printf("%d RDMA device(s)\n", n);
	}
	int e = 0;
	CHECK(ssv_open("softsync-no-such-device", &e) == NULL && e != 0, "opening a missing device: error %d", e);

	int tested = 0;
	for (int i = 0; i < n; i++) {
		const char *name = names + (size_t)i * SSV_NAME_LEN;
		struct ibv_context *ctx = ssv_open(name, &e);
		CHECK(ctx != NULL, "ssv_open %s: %s", name, strerror(e));
		if (ctx == NULL) {
			continue;
		}
		struct ssv_device_attr da;
		CHECK(ssv_query_device(ctx, &da) == 0, "ssv_query_device %s", name);
		CHECK(ssv_query_port(ctx, da.ports + 1, &(struct ssv_port_attr){0}) != 0, "query of a missing port succeeds");
		for (int p = 1; p <= da.ports; p++) {
			struct ssv_port_attr pa;
			CHECK(ssv_query_port(ctx, p, &pa) == 0, "ssv_query_port %s/%d", name, p);
			printf("%s port %d: state %d, link layer %d, MTU %d, LID %d\n", name, p, pa.state, pa.link_layer,
			       pa.active_mtu, pa.lid);
			if (pa.state == IBV_PORT_ACTIVE && !tested) {
				loopback(ctx, p, &pa);
				tested = 1;
			}
		}
		CHECK(ssv_close(ctx) == 0, "ssv_close %s", name);
	}
	if (failures > 0) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("ok (%s)\n", tested ? "loopback on an active port" : "device-less path");
	return 0;
}
