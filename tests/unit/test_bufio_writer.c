/* SPDX-License-Identifier: MIT */
/*
 * Suite "bufio", part 2 - the writer (printf larger than the buffer, flushes
 * across short writes into a slowly drained pipe, a broken pipe: sticky
 * -EPIPE and no SIGPIPE death in a coroutine, SIGPIPE pending on a plain
 * thread, deadlines) and frames (round trips of random sizes over fds and
 * over readers/writers, a frame larger than the writer's buffer going out
 * at once, -EMSGSIZE, truncated and clean ends).
 */
#include "bufio_test.h"

static void mkpipe(int p[2])
{
  cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
}

static uint64_t rng_next(uint64_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ---- writer --------------------------------------------------------------------------------- */

static void *printf_body(void *arg)
{
  (void)arg;
  int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  CO_CHECK(fd >= 0);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, fd, 64), 0);
  size_t bign = 10000;
  char *big = malloc(bign + 1);
  for (size_t i = 0; i < bign; i++)
    big[i] = (char)('a' + i % 26);
  big[bign] = '\0';
  size_t cap = 3 * bign;
  char *want = malloc(cap);
  size_t wl = 0;
  CO_EQ(weft_writer_printf(w, "n=%d;", 42), 5); /* fits */
  wl += (size_t)snprintf(want + wl, cap - wl, "n=%d;", 42);
  CO_EQ(weft_writer_buffered(w), 5);
  CO_EQ(weft_writer_printf(w, "[%s|%d]", big, 7), (ssize_t)bign + 4); /* > buffer */
  wl += (size_t)snprintf(want + wl, cap - wl, "[%s|%d]", big, 7);
  CO_EQ(weft_writer_buffered(w), 0);
  CO_EQ(weft_writer_write(w, "0123456789012345678901234567890123456789", 40), 40);
  wl += (size_t)snprintf(want + wl, cap - wl, "0123456789012345678901234567890123456789");
  /* 40 pending, 24 free: 30 bytes fit only after a flush. */
  CO_EQ(weft_writer_printf(w, "%.30s", big), 30);
  wl += (size_t)snprintf(want + wl, cap - wl, "%.30s", big);
  CO_EQ(weft_writer_buffered(w), 30);
  /* Exactly the free space (34): it fits, the buffer is full. */
  CO_EQ(weft_writer_printf(w, "%.34s", big + 1), 34);
  wl += (size_t)snprintf(want + wl, cap - wl, "%.34s", big + 1);
  CO_EQ(weft_writer_buffered(w), 64);
  CO_EQ(weft_writer_printf(w, "%s", ""), 0);
  /* Exactly a whole buffer, with a byte pending: a flush, then the text
   * formatted into the empty buffer - no heap block, nothing left over. */
  CO_EQ(weft_writer_printf(w, "%c", '#'), 1);
  wl += (size_t)snprintf(want + wl, cap - wl, "%c", '#');
  CO_EQ(weft_writer_printf(w, "%.64s", big + 2), 64);
  wl += (size_t)snprintf(want + wl, cap - wl, "%.64s", big + 2);
  CO_EQ(weft_writer_buffered(w), 64);
  /* write: 4 pending and exactly the free space plus a whole buffer - the
   * buffer is topped up and written, the rest kept (it fits). */
  CO_EQ(weft_writer_flush(w), 0);
  CO_EQ(weft_writer_write(w, big, 4), 4);
  CO_EQ(weft_writer_write(w, big + 4, 60 + 64), 124);
  wl += (size_t)snprintf(want + wl, cap - wl, "%.128s", big);
  CO_EQ(weft_writer_buffered(w), 64);
  for (int i = 0; i < 500; i++) {
    CO_EQ(weft_writer_printf(w, "%d,", i), i < 10 ? 2 : i < 100 ? 3 : 4);
    wl += (size_t)snprintf(want + wl, cap - wl, "%d,", i);
  }
  CO_EQ(weft_writer_flush(w), 0);
  CO_EQ(weft_writer_flush(w), 0);
  CO_EQ(weft_writer_buffered(w), 0);
  char *got = malloc(wl + 1);
  CO_EQ(pread(fd, got, wl + 1, 0), (ssize_t)wl);
  CO_CHECK(memcmp(got, want, wl) == 0);
  free(got);
  free(want);
  free(big);
  weft_writer_destroy(w);
  close(fd);
  return NULL;
}

Test(bufio, writer_printf_larger_than_buffer, .timeout = 30)
{
  run_both(printf_body, NULL);
  finish();
}

/* 300 KB through a 4 KiB pipe drained slowly: every flush and direct write
 * is cut into many short writes. */
static void *short_writes_body(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) >= 4096);
  size_t total = 300000;
  recv_job j = {.fd = p[0], .n = total, .eof = true, .pause = 50 * WEFT_USEC, .step = 1000};
  side s;
  side_start(&s, recv_check, &j);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, p[1], 8192), 0);
  unsigned char *src = malloc(total);
  fill_pat(src, total, 0);
  uint64_t seed = 0x9e3779b97f4a7c15u;
  size_t off = 0;
  while (off < total) {
    size_t k = 1 + rng_next(&seed) % 20000; /* below, around and above 8 KiB */
    if (k > total - off)
      k = total - off;
    CO_EQ(weft_writer_write(w, src + off, k), (ssize_t)k);
    off += k;
  }
  CO_EQ(weft_writer_flush(w), 0);
  close(p[1]);
  side_join(&s);
  free(src);
  weft_writer_destroy(w);
  close(p[0]);
  return NULL;
}

Test(bufio, writer_flush_across_short_writes, .timeout = 60)
{
  run_both(short_writes_body, NULL);
  finish();
}

static void *broken_pipe_coro(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, p[1], 16), 0);
  CO_EQ(weft_writer_write(w, "0123456789", 10), 10); /* buffered: no error yet */
  CO_EQ(weft_writer_flush(w), -EPIPE);
  CO_EQ(weft_writer_flush(w), -EPIPE); /* sticky */
  CO_EQ(weft_writer_write(w, "x", 1), -EPIPE);
  CO_EQ(weft_writer_printf(w, "%d", 1), -EPIPE);
  CO_EQ(weft_writer_write_frame(w, "x", 1), -EPIPE);
  weft_writer_destroy(w);
  /* A write straight through (larger than the buffer) breaks it too. */
  CO_EQ(weft_writer_create(&w, p[1], 16), 0);
  char big[64] = {0};
  CO_EQ(weft_writer_write(w, big, sizeof(big)), -EPIPE);
  CO_EQ(weft_writer_write(w, big, 1), -EPIPE);
  weft_writer_destroy(w);
  CO_EQ(weft_frame_write(p[1], "abc", 3), -EPIPE);
  CO_EQ(weft_write(p[1], "abc", 3), -EPIPE);
  int fd = tmp_file(1000);
  CO_EQ(weft_copy(fd, NULL, p[1], SIZE_MAX, NULL), -EPIPE); /* splice into the pipe */
  CO_EQ(lseek(fd, 0, SEEK_CUR), 0);
  close(fd);
  close(p[1]);
  return NULL;
}

Test(bufio, writer_broken_pipe_in_coroutine_is_sticky_epipe, .timeout = 30)
{
  rt_run(2, broken_pipe_coro, NULL);
  finish();
}

/* On a plain thread a write to a broken pipe raises SIGPIPE like write(2):
 * blocked here, it is left pending on this thread, which the test checks
 * and then takes. */
Test(bufio, writer_broken_pipe_on_plain_thread_raises_sigpipe, .timeout = 30)
{
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  cr_assert_eq(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
  int p[2];
  mkpipe(p);
  close(p[0]);
  weft_writer *w;
  cr_assert_eq(weft_writer_create(&w, p[1], 16), 0);
  cr_assert_eq(weft_writer_write(w, "abc", 3), 3);
  cr_assert_eq(weft_writer_flush(w), -EPIPE);
  cr_assert_eq(weft_writer_flush(w), -EPIPE);
  sigset_t pend;
  sigpending(&pend);
  cr_assert(sigismember(&pend, SIGPIPE));
  struct timespec zero = {0, 0};
  cr_assert_eq(sigtimedwait(&set, NULL, &zero), SIGPIPE);
  weft_writer_destroy(w);
  close(p[1]);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  finish();
}

static void *writer_deadline_body(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) >= 4096);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, p[1], 65536), 0);
  char *b = calloc(1, 10000);
  CO_EQ(weft_writer_write(w, b, 10000), 10000);
  weft_writer_set_deadline(w, weft_now() + 20 * WEFT_MSEC);
  CO_EQ(weft_writer_flush(w), -ETIMEDOUT); /* nobody reads */
  weft_writer_set_deadline(w, WEFT_NO_DEADLINE);
  CO_EQ(weft_writer_write(w, b, 1), -ETIMEDOUT); /* broken for good */
  CO_EQ(weft_writer_flush(w), -ETIMEDOUT);
  free(b);
  weft_writer_destroy(w);
  close2(p);
  return NULL;
}

Test(bufio, writer_deadline_breaks_it, .timeout = 30)
{
  run_both(writer_deadline_body, NULL);
  finish();
}

/* ---- frames ---------------------------------------------------------------------------------- */

#define FMAX 70000u /* larger than a pipe: frames cross short writes */
#define NFRAMES 150

typedef struct frame_job {
  int fd;
  bool buffered; /* through a weft_writer / weft_reader, else the fd calls */
  size_t bufsize;
} frame_job;

static size_t frame_len(uint64_t *seed, int i)
{
  if (i == 0 || i == 7)
    return 0;
  if (i == 1 || i == NFRAMES - 1)
    return FMAX;
  uint64_t x = rng_next(seed);
  return x % 4 == 0 ? x % (FMAX + 1) : x % 300; /* mostly small ones */
}

static void *frame_sender(void *arg)
{
  frame_job *j = arg;
  uint64_t seed = 12345;
  unsigned char *b = malloc(FMAX);
  weft_writer *w = NULL;
  if (j->buffered)
    CO_EQ(weft_writer_create(&w, j->fd, j->bufsize), 0);
  for (int i = 0; i < NFRAMES; i++) {
    size_t n = frame_len(&seed, i);
    fill_pat(b, n, (size_t)i);
    ssize_t r = j->buffered ? weft_writer_write_frame(w, b, n) : weft_frame_write(j->fd, b, n);
    CO_EQ(r, (ssize_t)n);
  }
  if (j->buffered) {
    CO_EQ(weft_writer_flush(w), 0);
    weft_writer_destroy(w);
  }
  close(j->fd);
  free(b);
  return NULL;
}

static void frame_roundtrip(bool send_buffered, bool recv_buffered, size_t bufsize)
{
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  frame_job sj = {.fd = p[1], .buffered = send_buffered, .bufsize = bufsize};
  side s;
  side_start(&s, frame_sender, &sj);
  uint64_t seed = 12345;
  unsigned char *b = malloc(FMAX);
  weft_reader *r = NULL;
  if (recv_buffered)
    CO_EQ(weft_reader_create(&r, p[0], bufsize), 0);
  int clean = -1;
  bool same = true;
  for (int i = 0; i < NFRAMES; i++) {
    size_t n = frame_len(&seed, i);
    ssize_t got = recv_buffered ? weft_reader_read_frame(r, b, FMAX, FMAX, &clean)
                                : weft_frame_read(p[0], b, FMAX, FMAX, &clean);
    CO_EQ(got, (ssize_t)n);
    CO_EQ(clean, 0);
    for (size_t k = 0; got > 0 && k < n; k++)
      same &= b[k] == pat((size_t)i + k);
  }
  CO_CHECK(same);
  ssize_t end = recv_buffered ? weft_reader_read_frame(r, b, FMAX, FMAX, &clean)
                              : weft_frame_read(p[0], b, FMAX, FMAX, &clean);
  CO_EQ(end, -EPIPE);
  CO_EQ(clean, 1);
  side_join(&s);
  weft_reader_destroy(r);
  free(b);
  close(p[0]);
}

static void *frames_body(void *arg)
{
  (void)arg;
  frame_roundtrip(false, false, 0);
  frame_roundtrip(true, true, 4096);  /* frames larger and smaller than the buffers */
  frame_roundtrip(false, true, 0);
  frame_roundtrip(true, false, 100000);
  frame_roundtrip(false, true, 2);    /* a reader smaller than a header */
  return NULL;
}

Test(bufio, frames_round_trip_random_sizes, .timeout = 90)
{
  run_both(frames_body, NULL);
  finish();
}

/* Puts raw bytes (a hand-made stream) into a new pipe and closes its write end. */
static void raw_pipe(int p[2], const void *data, size_t n)
{
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(write(p[1], data, n), (ssize_t)n);
  close(p[1]);
}

static ssize_t read_frame_any(int fd, weft_reader *r, void *buf, size_t cap, uint32_t max,
                              int *clean)
{
  return r ? weft_reader_read_frame(r, buf, cap, max, clean)
           : weft_frame_read(fd, buf, cap, max, clean);
}

static void *frame_errors_body(void *arg)
{
  (void)arg;
  unsigned char b[256];
  int clean = -1, p[2];
  for (int mode = 0; mode < 3; mode++) { /* fd, reader, reader of 2 bytes */
    weft_reader *r = NULL;
    /* A truncated body, then a truncated header. */
    unsigned char t1[] = {0, 0, 0, 10, 'a', 'b', 'c', 'd', 'e'};
    raw_pipe(p, t1, sizeof(t1));
    if (mode)
      CO_EQ(weft_reader_create(&r, p[0], mode == 1 ? 64 : 2), 0);
    CO_EQ(read_frame_any(p[0], r, b, sizeof(b), 0, &clean), -EPIPE);
    CO_EQ(clean, 0);
    weft_reader_destroy(r);
    r = NULL;
    close(p[0]);
    unsigned char t2[] = {0, 0, 0, 2, 'h', 'i', 0, 0};
    raw_pipe(p, t2, sizeof(t2));
    if (mode)
      CO_EQ(weft_reader_create(&r, p[0], mode == 1 ? 64 : 2), 0);
    CO_EQ(read_frame_any(p[0], r, b, sizeof(b), 0, NULL), 2);
    CO_EQ(read_frame_any(p[0], r, b, sizeof(b), 0, &clean), -EPIPE);
    CO_EQ(clean, 0);
    weft_reader_destroy(r);
    r = NULL;
    close(p[0]);

    /* Too long for max, then for cap. */
    unsigned char t3[4 + 100] = {0, 0, 0, 100};
    raw_pipe(p, t3, sizeof(t3));
    if (mode)
      CO_EQ(weft_reader_create(&r, p[0], mode == 1 ? 256 : 2), 0);
    CO_EQ(read_frame_any(p[0], r, b, sizeof(b), 99, &clean), -EMSGSIZE);
    CO_EQ(clean, 0);
    if (mode == 1) {
      /* The reader consumed nothing: a roomier call gets the frame. */
      CO_EQ(weft_reader_buffered(r), 104);
      CO_EQ(read_frame_any(p[0], r, b, 99, 0, &clean), -EMSGSIZE);
      CO_EQ(read_frame_any(p[0], r, b, 100, 100, &clean), 100);
      CO_EQ(read_frame_any(p[0], r, b, 100, 100, &clean), -EPIPE);
      CO_EQ(clean, 1);
    }
    weft_reader_destroy(r);
    r = NULL;
    close(p[0]);
    raw_pipe(p, t3, sizeof(t3));
    CO_EQ(weft_frame_read(p[0], b, 99, 0, &clean), -EMSGSIZE);
    close(p[0]);
  }
  /* Arguments. */
  CO_EQ(weft_frame_read(-1, b, sizeof(b), 0, &clean), -EBADF);
  CO_EQ(weft_frame_read(0, NULL, 10, 0, &clean), -EINVAL);
  CO_EQ(weft_frame_write(-1, b, 1), -EBADF);
  CO_EQ(weft_frame_write(1, NULL, 1), -EINVAL);
#if SIZE_MAX > UINT32_MAX
  CO_EQ(weft_frame_write(1, b, (size_t)UINT32_MAX + 1), -EMSGSIZE);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, 1, 16), 0);
  CO_EQ(weft_writer_write_frame(w, b, (size_t)UINT32_MAX + 1), -EMSGSIZE);
  CO_EQ(weft_writer_buffered(w), 0);
  weft_writer_destroy(w);
#endif
  /* An empty frame is a 4-byte header. */
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  CO_EQ(weft_frame_write(p[1], NULL, 0), 0);
  CO_EQ(weft_frame_write(p[1], "xyz", 3), 3);
  unsigned char want[] = {0, 0, 0, 0, 0, 0, 0, 3, 'x', 'y', 'z'};
  CO_EQ(read(p[0], b, sizeof(b)), (ssize_t)sizeof(want));
  CO_CHECK(memcmp(b, want, sizeof(want)) == 0);
  /* And is read into no buffer at all (NULL, cap 0), by fd or by reader. */
  CO_EQ(weft_frame_write(p[1], NULL, 0), 0);
  CO_EQ(weft_frame_read(p[0], NULL, 0, 0, &clean), 0);
  weft_reader *r;
  CO_EQ(weft_reader_create(&r, p[0], 16), 0);
  CO_EQ(weft_frame_write(p[1], NULL, 0), 0);
  CO_EQ(weft_reader_read_frame(r, NULL, 0, 0, &clean), 0);
  weft_reader_destroy(r);
  close2(p);
  return NULL;
}

Test(bufio, frame_errors_truncated_too_long_and_arguments, .timeout = 30)
{
  run_both(frame_errors_body, NULL);
  finish();
}

/* A writer's frame whose body is larger than the writer's buffer goes out
 * at once, with what was pending, header and body in order: nothing of it
 * stays behind in the buffer for a flush that a caller has no reason to
 * make yet. */
static void *big_frame_body(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, p[1], 16), 0);
  unsigned char body[20], got[64], want[64];
  fill_pat(body, sizeof(body), 0);
  for (size_t pending = 0; pending <= 15; pending += 3) {
    size_t wl = 0;
    if (pending) {
      CO_EQ(weft_writer_write(w, "abcdefghijklmnop", pending), (ssize_t)pending);
      memcpy(want, "abcdefghijklmnop", pending);
      wl = pending;
    }
    CO_EQ(weft_writer_write_frame(w, body, sizeof(body)), (ssize_t)sizeof(body));
    CO_EQ(weft_writer_buffered(w), 0);
    static const unsigned char hdr[4] = {0, 0, 0, 20};
    memcpy(want + wl, hdr, 4);
    memcpy(want + wl + 4, body, sizeof(body));
    wl += 4 + sizeof(body);
    /* All of it is in the pipe already (no flush). */
    CO_EQ(read(p[0], got, sizeof(got)), (ssize_t)wl);
    CO_CHECK(memcmp(got, want, wl) == 0);
  }
  weft_writer_destroy(w);
  close2(p);
  return NULL;
}

Test(bufio, writer_frame_larger_than_buffer_goes_out_at_once, .timeout = 30)
{
  run_both(big_frame_body, NULL);
  finish();
}

/* Deadlines of the frame calls (bare descriptor and reader), and printf's
 * encoding error, which writes nothing and leaves the writer whole. */
static void *frame_deadlines_body(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(pipe2(p, O_CLOEXEC), 0);
  unsigned char b[16];
  int clean = 7;
  /* Nothing comes. */
  CO_EQ(weft_frame_read_dl(p[0], b, sizeof(b), 0, &clean, weft_now() + 20 * WEFT_MSEC),
        -ETIMEDOUT);
  CO_EQ(clean, 0);
  /* Half a header on the bare descriptor: the deadline takes it away, and
   * the retry reads the middle of the frame as a header (bufio.h: the
   * stream is out of step). */
  static const unsigned char head[] = {0, 0}, rest[] = {0, 3, 'a', 'b', 'c'};
  CO_EQ(write(p[1], head, sizeof(head)), (ssize_t)sizeof(head));
  CO_EQ(weft_frame_read_dl(p[0], b, sizeof(b), 0, &clean, weft_now() + 20 * WEFT_MSEC),
        -ETIMEDOUT);
  CO_EQ(write(p[1], rest, sizeof(rest)), (ssize_t)sizeof(rest));
  CO_EQ(weft_frame_read(p[0], b, sizeof(b), 0, &clean), -EMSGSIZE); /* 0x00036162 */
  CO_EQ(read(p[0], b, sizeof(b)), 1);                                /* the 'c' */
  /* Half a frame in a reader's buffer: the error consumes nothing (the
   * frame fits the buffer), and the call with the rest gets it whole. */
  weft_reader *r;
  CO_EQ(weft_reader_create(&r, p[0], 64), 0);
  static const unsigned char half[] = {0, 0, 0, 5, 'h', 'e'};
  CO_EQ(write(p[1], half, sizeof(half)), (ssize_t)sizeof(half));
  weft_reader_set_deadline(r, weft_now() + 20 * WEFT_MSEC);
  CO_EQ(weft_reader_read_frame(r, b, sizeof(b), 0, &clean), -ETIMEDOUT);
  CO_EQ(weft_reader_buffered(r), sizeof(half));
  CO_EQ(write(p[1], "llo", 3), 3);
  weft_reader_set_deadline(r, WEFT_NO_DEADLINE);
  CO_EQ(weft_reader_read_frame(r, b, sizeof(b), 0, &clean), 5);
  CO_CHECK(memcmp(b, "hello", 5) == 0);
  weft_reader_destroy(r);
  /* A full pipe: the write's deadline passes. */
  CO_EQ(fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK), 0);
  while (write(p[1], b, sizeof(b)) > 0)
    ;
  CO_EQ(weft_frame_write_dl(p[1], "xyz", 3, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  close2(p);

  /* An encoding error: a wide character the C locale cannot convert. */
  int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  CO_CHECK(fd >= 0);
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, fd, 64), 0);
  CO_EQ(weft_writer_write(w, "a", 1), 1);
  CO_EQ(weft_writer_printf(w, "%ls", L"\xe9"), -EINVAL);
  CO_EQ(weft_writer_buffered(w), 1);
  CO_EQ(weft_writer_printf(w, "%d", 42), 2);
  CO_EQ(weft_writer_flush(w), 0);
  char got[8] = "";
  CO_EQ(pread(fd, got, sizeof(got), 0), 3);
  CO_CHECK(memcmp(got, "a42", 3) == 0);
  weft_writer_destroy(w);
  close(fd);
  return NULL;
}

Test(bufio, frame_deadlines_and_printf_encoding_error, .timeout = 30)
{
  run_both(frame_deadlines_body, NULL);
  finish();
}
