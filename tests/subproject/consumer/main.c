/* SPDX-License-Identifier: MIT */
/*
 * A program that uses weft only through its public API, as a project that
 * vendors weft would: 2 shards, a few tasks spread over them, each yielding
 * and sleeping; all joined. Prints OK and exits 0 when every result is right,
 * exits 77 when io_uring is not available to the process.
 */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#define TASKS 8

static void *work(void *arg)
{
  uintptr_t n = (uintptr_t)arg;
  for (int i = 0; i < 3; i++)
    if (weft_yield() < 0)
      return NULL;
  if (weft_sleep(WEFT_MSEC) < 0)
    return NULL;
  return (void *)(n * n + 1); /* never NULL, so NULL means failure */
}

static void *consumer_main(void *arg)
{
  (void)arg;
  if (weft_shard_count() != 2) {
    fprintf(stderr, "consumer: %d shards, expected 2\n", weft_shard_count());
    return NULL;
  }
  weft_task *t[TASKS];
  weft_spawn_opts o;
  weft_spawn_opts_init(&o);
  o.placement = WEFT_PLACE_ROUND_ROBIN;
  int spawned = 0, good = 0;
  for (; spawned < TASKS; spawned++) {
    int r = weft_spawn(&t[spawned], &o, work, (void *)(uintptr_t)spawned);
    if (r < 0) {
      fprintf(stderr, "consumer: weft_spawn: %s\n", weft_strerror(r));
      break;
    }
  }
  for (int i = 0; i < spawned; i++) {
    void *ret = NULL;
    int r = weft_join(t[i], &ret);
    if (r == 0 && ret == (void *)(uintptr_t)(i * i + 1))
      good++;
    else
      fprintf(stderr, "consumer: task %d: %s, result %p\n", i, weft_strerror(r), ret);
  }
  return good == TASKS ? (void *)1 : NULL;
}

int main(void)
{
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.shards = 2;
  void *ok = NULL;
  int r = weft_run(&cfg, consumer_main, NULL, &ok);
  if (r == -EPERM || r == -ENOSYS) {
    fprintf(stderr, "consumer: no io_uring here (%s)\n", weft_strerror(r));
    return 77;
  }
  if (r < 0) {
    fprintf(stderr, "consumer: weft_run: %s\n", weft_strerror(r));
    return 1;
  }
  if (!ok)
    return 1;
  printf("OK\n");
  return 0;
}
