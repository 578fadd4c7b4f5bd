/* SPDX-License-Identifier: MIT */
/*
 * Suite "steal", part 3 - a task that moves to another shard while it
 * waits must not write the errno of the thread it left. errno is per
 * thread, and the compiler keeps its address across a call (glibc declares
 * __errno_location const): a call that saved errno before a suspension
 * and restored it after would restore it into the first thread's errno -
 * at any moment of whatever coroutine runs there now.
 *
 * Shard 0 runs a hog that sets errno and burns the CPU, checking its errno
 * after each burn and yielding between burns; a stealable mover, spawned
 * on shard 0, makes calls that wait (a pool call, a process wait, a
 * buffered printf that flushes to a slow pipe, a signal wait) with its own errno set to
 * another value. Woken while the hog burns, the mover sits in shard 0's
 * stealable queue until shard 1, kept awake, takes it (the stuck-queue
 * rule): the write of a restore left across the wait would land in the
 * middle of a burn.
 */
#include "steal_test.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

struct errno_run {
  void (*calls)(void);
  void (*kick)(void);    /* if set, the hog's before each burn */
  bool expect_moves;     /* the calls let the mover move: go on until it has */
  atomic_bool mover_done, keeper_stop;
  atomic_int moves;      /* calls that returned on another shard */
  atomic_int clobbered;  /* hog burns after which errno was not its own */
};

static void *hog(void *arg)
{
  struct errno_run *e = arg;
  while (!atomic_load(&e->mover_done)) {
    if (e->kick)
      e->kick();
    errno = 42;
    burn_us(200);
    if (errno != 42)
      atomic_fetch_add(&e->clobbered, 1);
    weft_yield();
  }
  return NULL;
}

static void *keeper(void *arg)
{
  struct errno_run *e = arg;
  while (!atomic_load(&e->keeper_stop))
    weft_sleep(30 * WEFT_USEC);
  return NULL;
}

#define MOVER_CALLS 60
#define MOVES_WANTED 1

/* MOVER_CALLS calls - and, where moving is expected, more until the mover
 * has moved MOVES_WANTED times (40 s at most): a run in which it never
 * moved could not have shown a clobbered errno. A move needs shard 1's
 * thread on a CPU during one of the hog's 200 us burns; on a machine
 * loaded many times over (a load average of 19 on two CPUs) 10 s were
 * seen to pass without one. The test ends at the first move. */
static void *mover(void *arg)
{
  struct errno_run *e = arg;
  int64_t limit = weft_now() + 40 * WEFT_SEC;
  for (int i = 0; i < MOVER_CALLS || (e->expect_moves && atomic_load(&e->moves) < MOVES_WANTED &&
                                      weft_now() < limit);
       i++) {
    int before = weft_shard_id();
    errno = 7;
    e->calls();
    if (weft_shard_id() != before)
      atomic_fetch_add(&e->moves, 1);
  }
  atomic_store(&e->mover_done, true);
  return NULL;
}

static void *errno_main(void *arg)
{
  struct errno_run *e = arg;
  map_threads();
  weft_task *k, *h, *m;
  CO_EQ(rt_spawn(&k, WEFT_PLACE_PINNED, 1, keeper, e), 0);
  CO_EQ(rt_spawn(&m, WEFT_PLACE_STEALABLE, 0, mover, e), 0);
  CO_EQ(rt_spawn(&h, WEFT_PLACE_PINNED, 0, hog, e), 0);
  rt_join_int(m);
  rt_join_int(h);
  atomic_store(&e->keeper_stop, true);
  rt_join_int(k);
  return NULL;
}

static void run_errno_kicked(void (*calls)(void), void (*kick)(void), bool expect_moves)
{
  struct errno_run e = {.calls = calls, .kick = kick, .expect_moves = expect_moves};
  weft_config c;
  steal_cfg(&c);
  run_cfg(&c, errno_main, &e);
  cr_assert_eq(atomic_load(&e.clobbered), 0,
               "%d burns of the hog saw another errno (the mover moved %d times)",
               atomic_load(&e.clobbered), atomic_load(&e.moves));
  if (!expect_moves)
    cr_assert_eq(atomic_load(&e.moves), 0, "a task waiting for its child moved");
  else
    cr_assert_geq(atomic_load(&e.moves), MOVES_WANTED, "the mover never moved: nothing shown");
}

static void run_errno(void (*calls)(void), bool expect_moves)
{
  run_errno_kicked(calls, NULL, expect_moves);
}

/* A pool call (readlink runs on the blocking pool). */
static void pool_call(void)
{
  char buf[256];
  CO_CHECK(weft_readlink("/proc/self/exe", buf, sizeof(buf)) > 0);
}

Test(steal, a_pool_call_does_not_write_the_errno_of_a_thread_it_left, .timeout = 60)
{
  run_errno(pool_call, true);
}

/* A process wait: the task stays on its shard until the wait is over. */
static void process_wait_call(void)
{
  char *argv[] = {"true", NULL};
  pid_t pid;
  CO_EQ(posix_spawnp(&pid, "true", NULL, NULL, argv, environ), 0);
  int status = -1;
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

Test(steal, a_process_wait_does_not_write_the_errno_of_a_thread_it_left, .timeout = 60)
{
  run_errno(process_wait_call, false);
}

/* A printf that flushes (the buffer holds one line) into a pipe drained by
 * a plain thread. */
static int printf_pipe[2];

static void *drain_pipe(void *arg)
{
  (void)arg;
  char buf[4096];
  while (read(printf_pipe[0], buf, sizeof(buf)) > 0)
    ;
  return NULL;
}

static void printf_call(void)
{
  weft_writer *w;
  CO_EQ(weft_writer_create(&w, printf_pipe[1], 64), 0);
  for (int i = 0; i < 4; i++)
    CO_CHECK(weft_writer_printf(w, "line %d of a printf that flushes: %030d\n", i, i) > 0);
  CO_EQ(weft_writer_flush(w), 0);
  weft_writer_destroy(w);
}

Test(steal, a_flushing_printf_does_not_write_the_errno_of_a_thread_it_left, .timeout = 60)
{
  cr_assert_eq(pipe2(printf_pipe, O_CLOEXEC), 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, drain_pipe, NULL), 0);
  run_errno(printf_call, true);
  close(printf_pipe[1]);
  pthread_join(th, NULL);
  close(printf_pipe[0]);
}

/* A signal wait, for the signal the hog sends before each burn: the wait
 * ends while the hog burns, and the read that takes the signal comes after
 * the suspension. */
static int signal_fd = -1;

static void send_signal(void)
{
  kill(getpid(), SIGUSR2);
}

static void signal_call(void)
{
  CO_EQ(weft_signal_wait_dl(signal_fd, NULL, weft_now() + 10 * WEFT_SEC), SIGUSR2);
}

Test(steal, a_signal_wait_does_not_write_the_errno_of_a_thread_it_left, .timeout = 60)
{
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  cr_assert_eq(weft_signal_block(&set), 0); /* before the shard threads exist */
  signal_fd = weft_signal_open(&set);
  cr_assert_geq(signal_fd, 0);
  run_errno_kicked(signal_call, send_signal, true);
  close(signal_fd);
}
