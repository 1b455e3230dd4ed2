/*
 * rc_write_imm_check.c — smoke test of the Soft-RoCE VM harness (tools/softroce-vm/run.sh) on a real device.
 *
 * Purpose: prove that a host-built libibverbs program reaches a working kernel RDMA device in the VM. Opens
 * the first device (or $ZW_SOFTROCE_DEV), creates a PD, one CQ and two RC QPs connected to each other in this
 * process, and does RDMA WRITE WITH IMMEDIATE of 1 B, 4 KiB and 1 MiB from QP a into QP b's buffer, checking
 * the receiver's completion (opcode, length, immediate) and every payload byte.
 * Non-goals: performance (TCG), other verbs, more than one device, use as a library test of zerowire.
 *
 * Exit: 0 all checks passed; 1 a check failed (the message names it); 77 no RDMA device exists (skip).
 * Environment: ZW_SOFTROCE_DEV (device name), ZW_SOFTROCE_GID_INDEX (else: the first IPv4-mapped GID).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PORT 1
#define MAX_BYTES (1u << 20)

/* check: on failure print what, where and errno, and exit 1 (a test program, so exiting is the contract) */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      int err_ = errno;                                                        \
      fprintf(stderr, "rc_write_imm_check: FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " (errno %d: %s)\n", err_, strerror(err_));              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

struct side {
  struct ibv_qp* qp;  /* RC QP of this side */
  struct ibv_mr* mr;  /* MAX_BYTES buffer, local + remote write */
  unsigned char* buf; /* the MR's memory */
};

static struct ibv_device* pick_device(struct ibv_device** list, int n) {
  const char* want = getenv("ZW_SOFTROCE_DEV");
  for (int i = 0; want && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), want) == 0) return list[i];
  CHECK(!want, "device %s not found among %d device(s)", want, n);
  return list[0];
}

/* pick_gid: $ZW_SOFTROCE_GID_INDEX, else the first IPv4-mapped (::ffff:a.b.c.d, RoCE v2) GID, else index 0 */
static int pick_gid(struct ibv_context* ctx, int table_len) {
  static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const char* env = getenv("ZW_SOFTROCE_GID_INDEX");
  if (env && *env) return atoi(env);
  for (int i = 0; i < table_len; i++) {
    union ibv_gid gid;
    if (ibv_query_gid(ctx, PORT, i, &gid) == 0 && memcmp(gid.raw, v4_prefix, sizeof v4_prefix) == 0) return i;
  }
  return 0;
}

static void connect_qp(struct ibv_qp* qp, uint32_t remote_qpn, const union ibv_gid* gid, int gid_index) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = PORT;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "modify qp %u to INIT", qp->qp_num);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1; /* RoCE: every packet carries a GRH */
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = PORT;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
        "modify qp %u to RTR (gid index %d)", qp->qp_num, gid_index);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14; /* generous: TCG stalls vCPUs for milliseconds */
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) == 0,
        "modify qp %u to RTS", qp->qp_num);
}

/* wait_wc: busy-polls the CQ for one completion, at most 30 s */
static struct ibv_wc wait_wc(struct ibv_cq* cq) {
  struct ibv_wc wc;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    CHECK(n >= 0, "ibv_poll_cq returned %d", n);
    if (n == 1) return wc;
    clock_gettime(CLOCK_MONOTONIC, &t);
    CHECK(t.tv_sec - t0.tv_sec < 30, "no completion within 30 s");
  }
}

static void write_imm_once(struct side* a, struct side* b, struct ibv_cq* cq, uint32_t bytes, uint32_t imm) {
  for (uint32_t i = 0; i < bytes; i++) a->buf[i] = (unsigned char)(i * 7 + imm);
  memset(b->buf, 0xA5, MAX_BYTES); /* poison the destination */

  struct ibv_recv_wr rwr = {.wr_id = 2}, *bad_rwr;
  CHECK(ibv_post_recv(b->qp, &rwr, &bad_rwr) == 0, "post_recv"); /* WRITE_WITH_IMM consumes a receive */

  struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = bytes, .lkey = a->mr->lkey};
  struct ibv_send_wr swr, *bad_swr;
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 1;
  swr.sg_list = &sge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.imm_data = htonl(imm);
  swr.wr.rdma.remote_addr = (uintptr_t)b->buf;
  swr.wr.rdma.rkey = b->mr->rkey;
  CHECK(ibv_post_send(a->qp, &swr, &bad_swr) == 0, "post_send of %u bytes", bytes);

  int got_send = 0, got_recv = 0;
  while (!got_send || !got_recv) {
    struct ibv_wc wc = wait_wc(cq);
    CHECK(wc.status == IBV_WC_SUCCESS, "completion wr_id %llu: %s", (unsigned long long)wc.wr_id,
          ibv_wc_status_str(wc.status));
    if (wc.wr_id == 1) {
      CHECK(wc.opcode == IBV_WC_RDMA_WRITE, "sender opcode %d", wc.opcode);
      got_send = 1;
    } else {
      CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "receiver opcode %d, expected RECV_RDMA_WITH_IMM", wc.opcode);
      CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "receiver completion has no immediate");
      CHECK(ntohl(wc.imm_data) == imm, "immediate 0x%x, expected 0x%x", ntohl(wc.imm_data), imm);
      CHECK(wc.byte_len == bytes, "byte_len %u, expected %u", wc.byte_len, bytes);
      got_recv = 1;
    }
  }
  for (uint32_t i = 0; i < bytes; i++)
    CHECK(b->buf[i] == a->buf[i], "payload byte %u of %u: 0x%02x, expected 0x%02x", i, bytes, b->buf[i], a->buf[i]);
  CHECK(b->buf[bytes] == 0xA5 || bytes == MAX_BYTES, "byte %u past the payload was overwritten", bytes);
  printf("RDMA WRITE WITH IMM %7u bytes imm=0x%08x: payload and immediate OK\n", bytes, imm);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    printf("rc_write_imm_check: SKIPPED: no RDMA device (ibv_get_device_list found none; needs rdma_rxe or an HCA)\n");
    return 77;
  }
  struct ibv_device* dev = pick_device(list, n);
  struct ibv_context* ctx = ibv_open_device(dev);
  CHECK(ctx, "ibv_open_device %s", ibv_get_device_name(dev));
  struct ibv_port_attr port;
  CHECK(ibv_query_port(ctx, PORT, &port) == 0, "ibv_query_port");
  CHECK(port.state == IBV_PORT_ACTIVE, "port %d of %s is %s, not ACTIVE", PORT, ibv_get_device_name(dev),
        ibv_port_state_str(port.state));
  int gid_index = pick_gid(ctx, port.gid_tbl_len);
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, PORT, gid_index, &gid) == 0, "ibv_query_gid index %d", gid_index);
  char gid_text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, gid_text, sizeof gid_text);
  printf("device %s port %d gid[%d] %s\n", ibv_get_device_name(dev), PORT, gid_index, gid_text);

  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq");
  struct side s[2];
  for (int i = 0; i < 2; i++) {
    s[i].buf = aligned_alloc(4096, MAX_BYTES);
    CHECK(s[i].buf, "aligned_alloc");
    s[i].mr = ibv_reg_mr(pd, s[i].buf, MAX_BYTES, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(s[i].mr, "ibv_reg_mr of %u bytes", MAX_BYTES);
    struct ibv_qp_init_attr qa = {.send_cq = cq,
                                  .recv_cq = cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    s[i].qp = ibv_create_qp(pd, &qa);
    CHECK(s[i].qp, "ibv_create_qp");
  }
  connect_qp(s[0].qp, s[1].qp->qp_num, &gid, gid_index);
  connect_qp(s[1].qp, s[0].qp->qp_num, &gid, gid_index);

  const uint32_t sizes[] = {1, 4096, MAX_BYTES};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    write_imm_once(&s[0], &s[1], cq, sizes[i], 0xC0DE0000u + i);

  for (int i = 0; i < 2; i++) {
    CHECK(ibv_destroy_qp(s[i].qp) == 0, "ibv_destroy_qp");
    CHECK(ibv_dereg_mr(s[i].mr) == 0, "ibv_dereg_mr");
    free(s[i].buf);
  }
  CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
  ibv_free_device_list(list);
  printf("rc_write_imm_check: PASS\n");
  return 0;
}
