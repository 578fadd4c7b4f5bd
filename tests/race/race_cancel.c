/* SPDX-License-Identifier: MIT */
/*
 * race_cancel: cancellation of in-flight I/O under ThreadSanitizer.
 *
 * A 2-shard runtime. Each round, readers (pinned to either shard or
 * stealable) block reading one byte from a few shared pipes. While writer
 * coroutines on both shards feed the pipes byte by byte, readers are
 * cancelled at the same time from coroutines on both shards and from two
 * plain threads - so cancels race the completions, each other, and tasks
 * that have not started yet (some are cancelled right after the submit).
 * At the end of the round every reader still blocked is cancelled and all
 * are joined.
 *
 * Checks: every reader ends (read one byte, -ECANCELED, or never ran), and
 * no byte is lost or duplicated: bytes read + bytes left in the pipes ==
 * bytes written. Exit 0 pass, 1 fail, 77 without io_uring.
 */
#include "race_check.h"
#include "race_rt.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ROUNDS 6
#define READERS 400 /* per round */
#define PIPES 4
#define WRITERS 4   /* coroutines, each writes WRITES bytes */
#define WRITES 50

struct round {
  int p[PIPES][2];
  weft_task *readers[READERS];
  atomic_int started;
  atomic_int cancels_sent;
};

static void *reader(void *arg)
{
  int fd = (int)(intptr_t)arg;
  char c = 0;
  ssize_t n = weft_read(fd, &c, 1);
  if (n == 1 && c != 'b')
    return (void *)(intptr_t)-1000; /* a byte that was never written */
  return (void *)(intptr_t)n;
}

struct writer_arg {
  struct round *rd;
  int idx;
};

static void *writer(void *arg)
{
  struct writer_arg *w = arg;
  for (int i = 0; i < WRITES; i++) {
    int fd = w->rd->p[(w->idx + i) % PIPES][1];
    CHECK(weft_write(fd, "b", 1) == 1);
    if (i % 8 == 0)
      weft_yield();
  }
  return NULL;
}

/* Bytes still in the pipes (read without blocking). */
static int drain(struct round *rd)
{
  int n = 0;
  char buf[256];
  for (int i = 0; i < PIPES; i++) {
    int fl = fcntl(rd->p[i][0], F_GETFL);
    fcntl(rd->p[i][0], F_SETFL, fl | O_NONBLOCK);
    ssize_t got;
    while ((got = read(rd->p[i][0], buf, sizeof(buf))) > 0) {
      for (ssize_t k = 0; k < got; k++)
        CHECK(buf[k] == 'b');
      n += (int)got;
    }
    fcntl(rd->p[i][0], F_SETFL, fl);
  }
  return n;
}

static void run_round(weft_runtime *rt, struct round *rd, int round, int totals[3])
{
  for (int i = 0; i < PIPES; i++)
    CHECK(pipe(rd->p[i]) == 0);
  atomic_store(&rd->cancels_sent, 0);
  for (int i = 0; i < READERS; i++) {
    int fd = rd->p[i % PIPES][0];
    int placement = i % 3 == 2 ? WEFT_PLACE_STEALABLE : WEFT_PLACE_PINNED;
    CHECK(race_submit_on(rt, placement, i % 2, reader, (void *)(intptr_t)fd, &rd->readers[i]) == 0);
    if (i % 16 == 15) /* often before it even starts */
      CHECK(weft_cancel(rd->readers[i]) == 0);
  }
  /* Writers and two cancelling coroutines (one per shard), two cancelling
   * threads; shares 0..3 of the readers. The last share is left to the
   * final sweep. */
  struct writer_arg wa[WRITERS];
  weft_task *wt[WRITERS], *ct[2];
  for (int i = 0; i < WRITERS; i++) {
    wa[i] = (struct writer_arg){.rd = rd, .idx = i + round};
    CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, i % 2, writer, &wa[i], &wt[i]) == 0);
  }
  /* Share i: the readers whose index is i mod 4 (every cancel lands on
   * whichever shard the reader is on: the same one, the other one, or a
   * task still on its way there). */
  struct race_cancel_share ca[4];
  for (int i = 0; i < 4; i++)
    ca[i] = (struct race_cancel_share){.v = rd->readers, .n = READERS, .first = i, .step = 4,
                                       .yield_every = 4, .sent = &rd->cancels_sent};
  for (int i = 0; i < 2; i++)
    CHECK(race_submit_on(rt, WEFT_PLACE_PINNED, i, race_canceller, &ca[i], &ct[i]) == 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, race_canceller, &ca[2]) == 0);
  race_canceller(&ca[3 - (round % 2)]); /* this thread: share 3, or share 2 again */

  pthread_join(th, NULL);
  for (int i = 0; i < 2; i++)
    CHECK(weft_join(ct[i], NULL) == 0);
  for (int i = 0; i < WRITERS; i++)
    CHECK(weft_join(wt[i], NULL) == 0);

  /* Everyone still blocked is cancelled now; every reader must end. */
  for (int i = 0; i < READERS; i++) {
    int r = weft_cancel(rd->readers[i]);
    CHECK(r == 0 || r == -ESRCH);
  }
  int read1 = 0;
  for (int i = 0; i < READERS; i++) {
    void *v = (void *)-1;
    int j = weft_join(rd->readers[i], &v);
    intptr_t n = (intptr_t)v;
    if (n == 1) {
      read1++;
      totals[0]++;
      CHECK(j == 0 || j == -ECANCELED);
    } else {
      CHECK(j == -ECANCELED);
      CHECK(n == -ECANCELED || n == 0);
      totals[n == 0 ? 2 : 1]++;
    }
  }
  int left = drain(rd);
  int written = WRITERS * WRITES;
  if (read1 + left != written)
    fprintf(stderr, "round %d: %d read + %d left != %d written\n", round, read1, left, written);
  CHECK(read1 + left == written);
  for (int i = 0; i < PIPES; i++) {
    close(rd->p[i][0]);
    close(rd->p[i][1]);
  }
}

int main(void)
{
  weft_runtime *rt;
  int r = race_start(&rt, NULL, "race_cancel");
  if (r)
    return r;
  static struct round rd;
  int totals[3] = {0};
  for (int round = 0; round < ROUNDS; round++)
    run_round(rt, &rd, round, totals);

  weft_stats st;
  for (int i = 0; i < 100000; i++) {
    CHECK(weft_stats_get(rt, -1, &st) == 0);
    if (st.live == 0)
      break;
    weft_sleep(50 * WEFT_USEC);
  }
  CHECK(st.live == 0);
  CHECK(st.ops_submitted == st.ops_completed);
  CHECK(weft_runtime_stop(rt) == 0);
  printf("race_cancel: %d read, %d cancelled in the read, %d never started; %d failure(s)\n",
         totals[0], totals[1], totals[2], atomic_load(&failures));
  return atomic_load(&failures) ? 1 : 0;
}
