/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", part 3: a stealable coroutine that makes a hooked call stays
 * on its shard from then on (legacy code may keep errno's address, which is
 * per thread, across its calls), while the same coroutine without one is
 * moved by the stealing around it - the control that shows stealing went on.
 */
#include "io_helpers.h"
#include "legacy.h"

#include <stdatomic.h>
#include <sys/socket.h>

#define WALKERS 8 /* even: one hooked call first; odd: none */
#define MIN_YIELDS 500
#define PLAIN_MOVES 10

static atomic_int started, hooked_moves, plain_moves;
static atomic_bool hog_running;

static void burn_us(int us)
{
  for (int64_t end = weft_now() + us * WEFT_USEC; weft_now() < end;)
    ;
}

/* Pinned on shard 1: keeps it busy (it never yields, so it cannot steal)
 * until every walker has started on shard 0 - and made its hooked call.
 * Then shard 1 runs dry and steals started walkers. Bounded by 10 s. */
static void *hog(void *arg)
{
  (void)arg;
  atomic_store(&hog_running, true);
  int64_t give_up = weft_now() + 10 * WEFT_SEC;
  while (atomic_load(&started) < WALKERS && weft_now() < give_up)
    ;
  return NULL;
}

static void *walker(void *arg)
{
  bool hooked = arg != NULL;
  if (hooked) {
    int p[2];
    CO_EQ(io_pipe(p), 0);
    CO_EQ(write(p[1], "x", 1), 1);
    CO_EQ(legacy_read_byte(p[0]), 'x'); /* the hooked call */
    io_close_pipe(p);
  }
  int home = weft_shard_id();
  CO_EQ(home, 0);
  atomic_fetch_add(&started, 1);
  /* Until the walkers without a hooked call have moved PLAIN_MOVES times
   * (at least MIN_YIELDS steps, at most 10 s): the others, had they not
   * been pinned, would have moved about as often (8-13 times by the time
   * these reach 10, measured without the pin). Every 4th suspension is a
   * short sleep, which leaves a shard idle to steal. */
  int64_t give_up = weft_now() + 10 * WEFT_SEC;
  for (int y = 1;
       y < MIN_YIELDS || (atomic_load(&plain_moves) < PLAIN_MOVES && weft_now() < give_up);
       y++) {
    burn_us(1 + y % 3);
    CO_EQ(y % 4 ? weft_yield() : weft_sleep(20 * WEFT_USEC), 0);
    if (weft_shard_id() != home) {
      atomic_fetch_add(hooked ? &hooked_moves : &plain_moves, 1);
      home = weft_shard_id();
    }
  }
  return NULL;
}

static void *pin_main(void *arg)
{
  (void)arg;
  weft_task *h, *w[WALKERS];
  CO_EQ(io_spawn_on(&h, 1, hog, NULL), 0);
  CO_CHECK(RT_POLL(atomic_load(&hog_running)));
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_STEALABLE_PREFERRED;
  o.shard = 0;
  for (int i = 0; i < WALKERS; i++)
    CO_EQ(weft_spawn(&w[i], &o, walker, i % 2 == 0 ? &o : NULL), 0);
  for (int i = 0; i < WALKERS; i++)
    CO_EQ(weft_join(w[i], NULL), 0);
  CO_EQ(weft_join(h, NULL), 0);
  return NULL;
}

Test(hook, a_hooked_call_keeps_the_coroutine_on_its_shard, .timeout = 60)
{
  rt_run(2, pin_main, NULL);
  rt_assert_clean();
  cr_assert_eq(atomic_load(&started), WALKERS);
  cr_assert_gt(atomic_load(&plain_moves), 0, "stealing never moved a walker: no control");
  cr_assert_eq(atomic_load(&hooked_moves), 0, "%d moves after a hooked call",
               atomic_load(&hooked_moves));
}

/* ---- weft's own calls are not hooked calls ---------------------------------------------- */

/* weft_send on an idle shard first tries a plain non-blocking send(2).
 * Made through libc's exported send(), that attempt would reach the hook
 * and pin the task like the program's own calls; it goes to the kernel
 * directly, so the task stays stealable. weft_dump tells which it is. */
static void *weft_sender(void *arg)
{
  int *sv = arg;
  CO_EQ(weft_send(sv[0], "x", 1, 0), 1);
  CO_EQ(weft_send(sv[0], "y", 1, 0), 1);
  return (void *)(intptr_t)rt_dump_count(NULL, " stealable running");
}

static void *weft_send_main(void *arg)
{
  (void)arg;
  int sv[2];
  CO_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  weft_task *t;
  /* Alone on shard 1, so that shard is idle otherwise: the plain attempt. */
  CO_EQ(rt_spawn(&t, WEFT_PLACE_STEALABLE_PREFERRED, 1, weft_sender, sv), 0);
  CO_EQ(rt_join_int(t), 1);
  char got[2];
  CO_EQ(weft_recv_exact(sv[1], got, 2, NULL), 2);
  CO_CHECK(got[0] == 'x' && got[1] == 'y');
  CO_EQ(close(sv[0]), 0);
  CO_EQ(close(sv[1]), 0);
  return NULL;
}

Test(hook, weft_own_sends_leave_the_task_stealable, .timeout = 30)
{
  rt_run(2, weft_send_main, NULL);
  rt_assert_clean();
}
