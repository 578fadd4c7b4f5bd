/* SPDX-License-Identifier: MIT */
/*
 * Stream benchmark (DESIGN.md §5, "stream"): one TCP loopback connection to
 * a plain blocking echo server thread in the same process (TCP_NODELAY on
 * both ends). The client sends 4 KiB frames in lock-step batches of 32:
 * write the batch (128 KiB, looping over short writes), then read 128 KiB
 * back. 50,000 frames (--quick: 5,000). Metric: echoed MB/s (10^6 bytes of
 * payload sent per second; the same amount comes back).
 *
 *   weft:   a coroutine on a 1-shard runtime: weft_write for the batch,
 *           a weft_recv_stream (16 KiB x 64 buffers, multishot receive) to
 *           read it back.
 *   ref:    a bare liburing client on a plain thread, its own ring
 *           (SINGLE_ISSUER + DEFER_TASKRUN + TASKRUN_FLAG where the kernel
 *           has them), the same 16 KiB x 64 provided-buffer ring with one
 *           multishot receive kept armed, IORING_OP_SEND for the batch,
 *           every buffer handed back as soon as it is counted, and the
 *           same wait as a weft shard: poll the CQ and the task-work flag
 *           for spin_ns (weft's default, 20 us), then sleep in
 *           io_uring_enter. Without that spin the bare client sleeps and
 *           is woken for every completion, and loses to weft by far; that
 *           variant is reported too ("ref_nospin_MBps").
 * Both check one byte of every buffer against the pattern sent. The ratio
 * is weft / ref (target >= 0.9). Rounds alternate; each side keeps its best
 * round (see bench_util.h), medians go in extra fields.
 *
 *   bench_stream [--quick]
 */
#include "bench_util.h"

#include "recv_stream_internal.h"
#include "weft.h"

#include <arpa/inet.h>
#include <limits.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>

#define FRAME 4096
#define WINDOW 32
#define BATCH (FRAME * WINDOW)
#define BUF_SIZE 16384
#define BUF_COUNT 64

static void die(const char *what, int err)
{
  fprintf(stderr, "bench_stream: %s: %s\n", what, strerror(err < 0 ? -err : err));
  exit(1);
}

/* The payload: byte i of the stream is (uint8_t)(i * 7 + (i >> 12)). A batch
 * buffer holds one period of it (BATCH divides the stream evenly). */
static uint8_t pat(uint64_t i)
{
  return (uint8_t)(i * 7 + (i >> 12));
}

static uint8_t *batch_buf;

static void check_byte(const void *data, uint64_t at)
{
  if (*(const uint8_t *)data != pat(at % BATCH))
    die("echoed data differs", EIO);
}

/* ---- the echo server --------------------------------------------------------------- */

static void nodelay(int fd)
{
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
    die("TCP_NODELAY", errno);
}

static void *echo_server(void *arg)
{
  int fd = (int)(intptr_t)arg;
  static __thread uint8_t buf[BATCH];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0)
      break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
      if (w < 0)
        die("server send", errno);
      off += w;
    }
  }
  close(fd);
  return NULL;
}

/* A connected client socket, with the server thread on the other end. */
static int connect_pair(pthread_t *server)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
      getsockname(l, (struct sockaddr *)&a, &len) < 0)
    die("listen", errno);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
    die("connect", errno);
  int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  if (s < 0)
    die("accept", errno);
  close(l);
  nodelay(c);
  nodelay(s);
  if (pthread_create(server, NULL, echo_server, (void *)(intptr_t)s) != 0)
    die("pthread_create", EAGAIN);
  return c;
}

static double mbps(long frames, int64_t ns)
{
  return (double)frames * FRAME / ((double)ns / 1e9) / 1e6;
}

/* ---- the reference: bare liburing ------------------------------------------------------ */

enum { UD_RECV = 1, UD_SEND = 2 };
#define NO_SEND INT_MIN

struct ref {
  struct io_uring ring;
  struct io_uring_buf_ring *br;
  uint8_t *bufs;
  int fd;
  uint64_t recvd;
  bool armed;
};

static void ref_arm(struct ref *r)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  io_uring_prep_recv(sqe, r->fd, NULL, 0, 0);
  sqe->ioprio |= IORING_RECV_MULTISHOT;
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = 0;
  io_uring_sqe_set_data64(sqe, UD_RECV);
  r->armed = true;
}

/* Handles the CQEs there are (re-arming the receive if it ended); returns
 * the send's result if its CQE was among them, else NO_SEND. */
static int ref_reap(struct ref *r)
{
  int send_res = NO_SEND;
  struct io_uring_cqe *cqe;
  unsigned head, n = 0;
  io_uring_for_each_cqe(&r->ring, head, cqe) {
    n++;
    if (cqe->user_data == UD_SEND) {
      send_res = cqe->res;
      continue;
    }
    if (cqe->flags & IORING_CQE_F_BUFFER) {
      unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
      if (cqe->res > 0) {
        check_byte(r->bufs + (size_t)bid * BUF_SIZE, r->recvd);
        r->recvd += (uint64_t)cqe->res;
      }
      io_uring_buf_ring_add(r->br, r->bufs + (size_t)bid * BUF_SIZE, BUF_SIZE,
                            (unsigned short)bid, io_uring_buf_ring_mask(BUF_COUNT), 0);
      io_uring_buf_ring_advance(r->br, 1);
    }
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
      r->armed = false;
      if (cqe->res <= 0 && cqe->res != -ENOBUFS)
        die("ref multishot recv", cqe->res);
    }
  }
  io_uring_cq_advance(&r->ring, n);
  if (!r->armed)
    ref_arm(r);
  return send_res;
}

/* Submits what is queued and waits for a CQE the way a weft shard does:
 * poll the CQ (and, with DEFER_TASKRUN, the kernel's "task work pending"
 * flag) for up to spin_ns, then sleep in io_uring_enter. */
static void ref_wait(struct ref *r, int64_t spin_ns)
{
  if (io_uring_sq_ready(&r->ring))
    io_uring_submit(&r->ring);
  int64_t until = spin_ns > 0 ? bench_now_ns() + spin_ns : 0;
  while (spin_ns > 0) {
    for (int i = 0; i < 64; i++) {
      if (io_uring_cq_ready(&r->ring))
        return;
      if (IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_TASKRUN) {
        io_uring_get_events(&r->ring);
        if (io_uring_cq_ready(&r->ring))
          return;
      }
      __builtin_ia32_pause();
    }
    if (bench_now_ns() >= until)
      break;
  }
  io_uring_submit_and_wait(&r->ring, 1);
}

static double ref_round(long frames, int64_t spin_ns)
{
  pthread_t server;
  struct ref r = {.fd = connect_pair(&server)};
  struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                       IORING_SETUP_TASKRUN_FLAG};
  int e = io_uring_queue_init_params(64, &r.ring, &p);
  if (e == -EINVAL) {
    memset(&p, 0, sizeof(p));
    e = io_uring_queue_init_params(64, &r.ring, &p);
  }
  if (e < 0)
    die("io_uring_queue_init", e);
  size_t ring_bytes = BUF_COUNT * sizeof(struct io_uring_buf);
  if (posix_memalign((void **)&r.br, 4096, ring_bytes < 4096 ? 4096 : ring_bytes) != 0 ||
      !(r.bufs = malloc((size_t)BUF_SIZE * BUF_COUNT)))
    die("malloc", ENOMEM);
  io_uring_buf_ring_init(r.br);
  struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)r.br,
                                 .ring_entries = BUF_COUNT, .bgid = 0};
  if ((e = io_uring_register_buf_ring(&r.ring, &reg, 0)) < 0)
    die("io_uring_register_buf_ring", e);
  for (int i = 0; i < BUF_COUNT; i++)
    io_uring_buf_ring_add(r.br, r.bufs + (size_t)i * BUF_SIZE, BUF_SIZE, (unsigned short)i,
                          io_uring_buf_ring_mask(BUF_COUNT), i);
  io_uring_buf_ring_advance(r.br, BUF_COUNT);
  ref_arm(&r);

  uint64_t sent = 0;
  int64_t t0 = bench_now_ns();
  for (long f = 0; f < frames; f += WINDOW) {
    for (size_t off = 0; off < BATCH;) {
      struct io_uring_sqe *sqe = io_uring_get_sqe(&r.ring);
      io_uring_prep_send(sqe, r.fd, batch_buf + off, BATCH - off, MSG_NOSIGNAL);
      io_uring_sqe_set_data64(sqe, UD_SEND);
      int res;
      do {
        ref_wait(&r, spin_ns);
        res = ref_reap(&r);
      } while (res == NO_SEND);
      if (res <= 0)
        die("ref send", res);
      off += (size_t)res;
    }
    sent += BATCH;
    while (r.recvd < sent) {
      ref_wait(&r, spin_ns);
      ref_reap(&r);
    }
  }
  int64_t ns = bench_now_ns() - t0;

  shutdown(r.fd, SHUT_WR); /* the server sees EOF and leaves */
  pthread_join(server, NULL);
  io_uring_queue_exit(&r.ring); /* ends the multishot receive too */
  close(r.fd);
  free(r.br);
  free(r.bufs);
  return mbps(frames, ns);
}

/* ---- weft --------------------------------------------------------------------------------- */

struct weft_round {
  long frames;
  int fd;
  int64_t ns;
  int multishot;
  weft__recv_stream_counters c;
};

static void *weft_client(void *arg)
{
  struct weft_round *w = arg;
  weft_recv_stream_opts o = {.buf_size = BUF_SIZE, .buf_count = BUF_COUNT};
  weft_recv_stream *s;
  int e = weft_recv_stream_open(&s, w->fd, &o);
  if (e < 0)
    die("weft_recv_stream_open", e);
  w->multishot = weft_recv_stream_multishot(s);
  uint64_t sent = 0, recvd = 0;
  int64_t t0 = weft_now();
  for (long f = 0; f < w->frames; f += WINDOW) {
    for (size_t off = 0; off < BATCH;) {
      ssize_t n = weft_write(w->fd, batch_buf + off, BATCH - off);
      if (n <= 0)
        die("weft_write", (int)n);
      off += (size_t)n;
    }
    sent += BATCH;
    while (recvd < sent) {
      const void *d;
      ssize_t n = weft_recv_stream_next(s, &d, WEFT_NO_DEADLINE);
      if (n <= 0)
        die("weft_recv_stream_next", n ? (int)n : EPIPE);
      check_byte(d, recvd);
      recvd += (uint64_t)n;
    }
  }
  w->ns = weft_now() - t0;
  weft__recv_stream_get_counters(s, &w->c);
  weft_recv_stream_close(s);
  return NULL;
}

static double weft_round_run(long frames, struct weft_round *w)
{
  pthread_t server;
  w->frames = frames;
  w->fd = connect_pair(&server);
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 1;
  int e = weft_run(&cfg, weft_client, w, NULL);
  if (bench_uring_missing(e)) {
    fprintf(stderr, "bench_stream: io_uring is not available here\n");
    exit(BENCH_SKIP);
  }
  if (e < 0)
    die("weft_run", e);
  shutdown(w->fd, SHUT_WR);
  pthread_join(server, NULL);
  close(w->fd);
  return mbps(frames, w->ns);
}

/* ---- main ---------------------------------------------------------------------------------- */

static double best(const double *v, int n)
{
  double m = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] > m)
      m = v[i];
  return m;
}

int main(int argc, char **argv)
{
  bool quick = bench_quick(argc, argv);
  bench_watchdog("bench_stream", quick ? 60 : 300);
  long frames = quick ? 5000 : 50000;
  int rounds = quick ? 4 : 7;
  frames = (frames + WINDOW - 1) / WINDOW * WINDOW;
  batch_buf = malloc(BATCH);
  if (!batch_buf)
    die("malloc", ENOMEM);
  for (uint64_t i = 0; i < BATCH; i++)
    batch_buf[i] = pat(i);

  /* The spin of the reference is weft's default (weft_config.spin_ns). */
  weft_config dflt;
  weft_config_init(&dflt);
  int64_t spin = dflt.spin_ns;
  double ref[8], sleepy[8], wv[8];
  struct weft_round w = {0};
  /* One untimed round of each first: page faults, socket buffer growth. */
  long warm = frames / 10 > WINDOW ? frames / 10 : WINDOW;
  ref_round(warm, spin);
  weft_round_run(warm, &w);
  for (int i = 0; i < rounds; i++) {
    ref[i] = ref_round(frames, spin);
    wv[i] = weft_round_run(frames, &w);
    sleepy[i] = ref_round(frames, 0);
  }
  double rb = best(ref, rounds), wb = best(wv, rounds), sb = best(sleepy, rounds);
  double rmed = bench_median(ref, (size_t)rounds), wmed = bench_median(wv, (size_t)rounds);
  bench_print("stream", "MBps", wb, "liburing_MBps", rb, wb / rb,
              ",\"median\":%.3f,\"ref_median\":%.3f,\"ref_nospin_MBps\":%.3f,"
              "\"frames\":%ld,\"multishot\":%d,\"rearms\":%llu",
              wmed, rmed, sb, frames, w.multishot,
              (unsigned long long)(w.c.arms ? w.c.arms - 1 : 0));
  free(batch_buf);
  return 0;
}
