/* SPDX-License-Identifier: MIT */
/*
 * Suite "coro", part 1 - the coroutine layer on its own (coro/): no
 * runtime, no shard. Coroutines are created, resumed and destroyed straight
 * from the test thread: many switches keeping values and callee-saved
 * registers, floating-point values across switches, return values and states, names and ids, 10,000 alive at
 * once, the stack cache, one coroutine resumed from two threads, nesting,
 * and an object embedded above the frames. Stack faults, slab stacks and
 * bad input are in test_coro_stacks.c.
 *
 * Criterion runs every test in a process of its own, so the process-wide
 * stack counters start fresh in each; tests still compare against a reading
 * taken at their start rather than against zero.
 */
#include "coro_test.h"

/* ---- many switches, values and callee-saved registers ---------------------- */

#define NCORO 8
#define NSTEP 10000

static inline uint64_t rotl(uint64_t x, int r)
{
  return (x << r) | (x >> (64 - r));
}

/* Ten values that all feed each other (a Fibonacci pair, an LCG, xor-rotate
 * mixes), so every one stays live from one step to the next. */
#define STEP(a, b, c, d, e, f, g, h, i, j, k)                    \
  do {                                                           \
    uint64_t fib_ = (a) + (b);                                   \
    (a) = (b);                                                   \
    (b) = fib_ ^ (k);                                            \
    (c) = rotl((c) + (d), 7) ^ (j);                              \
    (d) = (d) * 0x9E3779B97F4A7C15u + (e);                       \
    (e) ^= rotl((f), 13) + (a);                                  \
    (f) += (g) * 3 + (c);                                        \
    (g) = rotl((g) ^ (h), 29) - (d);                             \
    (h) += (i) ^ (e);                                            \
    (i) = (i) * 6364136223846793005u + 1442695040888963407u + (f); \
    (j) ^= (g) + rotl((b), 17) + (h);                            \
  } while (0)

#define FOLD(a, b, c, d, e, f, g, h, i, j) \
  ((a) ^ rotl(b, 3) ^ rotl(c, 9) ^ rotl(d, 15) ^ rotl(e, 21) ^ rotl(f, 27) ^ \
   rotl(g, 33) ^ rotl(h, 39) ^ rotl(i, 45) ^ rotl(j, 51))

struct hash_job {
  weft__coro *co;
  uint64_t seed;
  uint64_t published;   /* FOLD after each step, read by the driver */
  unsigned self_wrong;  /* steps where weft__coro_self() was not co */
};

static void *hash_fn(void *arg)
{
  struct hash_job *job = arg;
  uint64_t a = job->seed, b = 1, c = a * 3, d = a ^ 0x55, e = 7, f = a + 11, g = 13,
           h = a << 7, i = 17, j = ~a;
  for (uint64_t k = 0; k < NSTEP; k++) {
    STEP(a, b, c, d, e, f, g, h, i, j, k);
    job->published = FOLD(a, b, c, d, e, f, g, h, i, j);
    weft__coro *self = weft__coro_self();
    if (self != job->co)
      job->self_wrong++;
    weft__coro_suspend(self);
  }
  return (void *)(uintptr_t)FOLD(a, b, c, d, e, f, g, h, i, j);
}

/* The same computation without coroutines. */
static void hash_reference(uint64_t seed, uint64_t *per_step, uint64_t *final)
{
  uint64_t a = seed, b = 1, c = a * 3, d = a ^ 0x55, e = 7, f = a + 11, g = 13, h = a << 7,
           i = 17, j = ~a;
  for (uint64_t k = 0; k < NSTEP; k++) {
    STEP(a, b, c, d, e, f, g, h, i, j, k);
    per_step[k] = FOLD(a, b, c, d, e, f, g, h, i, j);
  }
  *final = FOLD(a, b, c, d, e, f, g, h, i, j);
}

Test(coro, switches_keep_values_and_registers, .timeout = 60)
{
  static struct hash_job jobs[NCORO];
  static uint64_t expect[NCORO][NSTEP], seen[NSTEP][NCORO];
  uint64_t expect_final[NCORO];
  for (int n = 0; n < NCORO; n++) {
    jobs[n] = (struct hash_job){.seed = 0x1234567ull * (uint64_t)(n + 1)};
    jobs[n].co = make(hash_fn, &jobs[n], STACK, "hash");
    hash_reference(jobs[n].seed, expect[n], &expect_final[n]);
  }

  /* The driver keeps accumulators of its own live across every resume: if a
   * switch lost one of the test thread's callee-saved registers they drift. */
  uint64_t x0 = 0, x1 = 1, x2 = 2, x3 = 3, x4 = 4, x5 = 5;
  for (int k = 0; k < NSTEP; k++) {
    for (int n = 0; n < NCORO; n++) {
      int st = weft__coro_resume(jobs[n].co);
      uint64_t p = jobs[n].published;
      seen[k][n] = p;
      x0 += p;
      x1 = rotl(x1 ^ p, 5);
      x2 = x2 * 31 + p;
      x3 ^= p >> 3;
      x4 = rotl(x4 + p, 11);
      x5 += x0 ^ x3;
      if (st != WEFT__CORO_SUSPENDED || p != expect[n][k])
        cr_assert_fail("coroutine %d step %d: state %d, value %#llx, want %#llx", n, k, st,
                       (unsigned long long)p, (unsigned long long)expect[n][k]);
    }
  }
  for (int n = 0; n < NCORO; n++) {
    cr_assert_eq(weft__coro_resume(jobs[n].co), WEFT__CORO_FINISHED);
    cr_assert_eq((uint64_t)(uintptr_t)jobs[n].co->ret, expect_final[n]);
    cr_assert_eq(jobs[n].self_wrong, 0);
    weft__coro_destroy(jobs[n].co);
  }

  uint64_t y0 = 0, y1 = 1, y2 = 2, y3 = 3, y4 = 4, y5 = 5;
  for (int k = 0; k < NSTEP; k++) {
    for (int n = 0; n < NCORO; n++) {
      uint64_t p = seen[k][n];
      y0 += p;
      y1 = rotl(y1 ^ p, 5);
      y2 = y2 * 31 + p;
      y3 ^= p >> 3;
      y4 = rotl(y4 + p, 11);
      y5 += y0 ^ y3;
    }
  }
  cr_assert(x0 == y0 && x1 == y1 && x2 == y2 && x3 == y3 && x4 == y4 && x5 == y5,
            "the test thread's registers changed across switches");
  cr_assert_null(weft__coro_self());
}

/* ---- floating-point values across switches ---------------------------------
 * SSE and x87 registers are all caller-saved: the switch (inline assembly in
 * coro/fcontext.h) must declare them clobbered, or the compiler may keep a
 * double in a register across it while another coroutine overwrites it.
 * Each coroutine keeps eight doubles and a long double live from one step
 * to the next; so does the driver across every resume. */

#define FSTEP 2000

static inline double fp_step(double *v, long double *x, uint64_t k)
{
  double s = 0;
  for (int n = 0; n < 8; n++) {
    v[n] = v[n] * (1.0 + 1e-7 * (n + 1)) + (double)((k + (uint64_t)n) % 7) * 0.25;
    s += v[n];
  }
  *x = *x * 1.0000001L + (long double)s;
  return s + (double)*x;
}

struct fp_job {
  weft__coro *co;
  double seed;
  double published; /* after each step */
};

static void *fp_fn(void *arg)
{
  struct fp_job *job = arg;
  double a = job->seed, b = a * 2, c = a + 3, d = a / 5, e = 7, f = a * a, g = 11, h = -a;
  long double x = job->seed;
  for (uint64_t k = 0; k < FSTEP; k++) {
    double v[8] = {a, b, c, d, e, f, g, h};
    job->published = fp_step(v, &x, k);
    a = v[0], b = v[1], c = v[2], d = v[3], e = v[4], f = v[5], g = v[6], h = v[7];
    /* No call between the step and the switch: nothing else makes the
     * compiler spill the doubles. */
    weft__coro_suspend(job->co);
  }
  return NULL;
}

static void fp_reference(double seed, double *per_step)
{
  double v[8] = {seed, seed * 2, seed + 3, seed / 5, 7, seed * seed, 11, -seed};
  long double x = seed;
  for (uint64_t k = 0; k < FSTEP; k++)
    per_step[k] = fp_step(v, &x, k);
}

Test(coro, switches_keep_floating_point_values, .timeout = 60)
{
  static struct fp_job jobs[NCORO];
  static double expect[NCORO][FSTEP];
  for (int n = 0; n < NCORO; n++) {
    jobs[n] = (struct fp_job){.seed = 1.5 * (n + 1)};
    jobs[n].co = make(fp_fn, &jobs[n], STACK, "fp");
    fp_reference(jobs[n].seed, expect[n]);
  }
  double y0 = 0.5, y1 = 1.25, y2 = -3, y3 = 0;
  long double z = 2;
  for (int k = 0; k < FSTEP; k++) {
    for (int n = 0; n < NCORO; n++) {
      cr_assert_eq(weft__coro_resume(jobs[n].co), WEFT__CORO_SUSPENDED);
      double p = jobs[n].published;
      if (p != expect[n][k])
        cr_assert_fail("coroutine %d step %d: %.17g, want %.17g", n, k, p, expect[n][k]);
      y0 = y0 * 0.5 + p;
      y1 += p * 1e-3;
      y2 -= y0 * 1e-6;
      y3 = y3 * 0.999 + y1;
      z = z * 0.75L + (long double)p;
    }
  }
  /* The driver's values, computed again without switches in between. */
  double w0 = 0.5, w1 = 1.25, w2 = -3, w3 = 0;
  long double zz = 2;
  for (int k = 0; k < FSTEP; k++)
    for (int n = 0; n < NCORO; n++) {
      double p = expect[n][k];
      w0 = w0 * 0.5 + p;
      w1 += p * 1e-3;
      w2 -= w0 * 1e-6;
      w3 = w3 * 0.999 + w1;
      zz = zz * 0.75L + (long double)p;
    }
  cr_assert(y0 == w0 && y1 == w1 && y2 == w2 && y3 == w3 && z == zz,
            "the test thread's floating-point values changed across switches");
  for (int n = 0; n < NCORO; n++) {
    cr_assert_eq(weft__coro_resume(jobs[n].co), WEFT__CORO_FINISHED);
    weft__coro_destroy(jobs[n].co);
  }
}

/* ---- return values and states ----------------------------------------------- */

struct state_probe {
  int state_inside;      /* co->state as seen while running */
  weft__coro *self_inside;
};

static void *state_fn(void *arg)
{
  struct state_probe *p = arg;
  weft__coro *self = weft__coro_self();
  p->self_inside = self;
  p->state_inside = self->state;
  weft__coro_suspend(self);
  return (void *)(uintptr_t)0xC0FFEE;
}

static void *never_fn(void *arg)
{
  int *ran = arg;
  *ran = 1;
  return NULL;
}

Test(coro, return_value_and_states, .timeout = 30)
{
  struct state_probe p = {.state_inside = -1};
  weft__coro *co = make(state_fn, &p, STACK, NULL);
  cr_assert_eq(co->state, WEFT__CORO_CREATED);
  cr_assert_null(co->ret);

  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_SUSPENDED);
  cr_assert_eq(co->state, WEFT__CORO_SUSPENDED);
  cr_assert_eq(p.state_inside, WEFT__CORO_RUNNING);
  cr_assert_eq(p.self_inside, co);
  cr_assert_null(weft__coro_self(), "self must be NULL again outside the coroutine");

  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  cr_assert_eq(co->state, WEFT__CORO_FINISHED);
  cr_assert_eq((uintptr_t)co->ret, 0xC0FFEE);
  weft__coro_destroy(co);

  /* Destroying a coroutine that never ran or sits suspended is allowed, and
   * the never-run one's function is never called. */
  int ran = 0;
  weft__coro *idle = make(never_fn, &ran, STACK, "idle");
  weft__coro_destroy(idle);
  cr_assert_eq(ran, 0);
  weft__coro *half = make(state_fn, &p, STACK, "half");
  cr_assert_eq(weft__coro_resume(half), WEFT__CORO_SUSPENDED);
  weft__coro_destroy(half);
}

/* ---- names and ids ---------------------------------------------------------- */

Test(coro, names_copied_truncated_ids_increasing, .timeout = 30)
{
  char name[64] = "worker";
  weft__coro *a = make(ret_arg_fn, NULL, STACK, name);
  strcpy(name, "clobbered"); /* the coroutine keeps its own copy */
  cr_assert_str_eq(a->name, "worker");

  const char *longname = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"; /* 42 chars */
  weft__coro *b = make(ret_arg_fn, NULL, STACK, longname);
  cr_assert_eq(strlen(b->name), WEFT__CORO_NAME_MAX - 1);
  cr_assert_eq(strncmp(b->name, longname, WEFT__CORO_NAME_MAX - 1), 0);

  weft__coro *c = make(ret_arg_fn, NULL, STACK, NULL);
  cr_assert_str_eq(c->name, "");

  const char *exact = "0123456789012345678901234567890"; /* 31 chars: kept whole */
  weft__coro *d = make(ret_arg_fn, NULL, STACK, exact);
  cr_assert_str_eq(d->name, exact);

  cr_assert_gt(a->id, 0);
  cr_assert_gt(b->id, a->id);
  cr_assert_gt(c->id, b->id);
  cr_assert_gt(d->id, c->id);

  /* Ids are never reused, even when the stack is. */
  uint64_t last = d->id;
  weft__coro_destroy(d);
  weft__coro *e = make(ret_arg_fn, NULL, STACK, NULL);
  cr_assert_gt(e->id, last);

  weft__coro *all[] = {a, b, c, e};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
    cr_assert_eq(weft__coro_resume(all[k]), WEFT__CORO_FINISHED);
    weft__coro_destroy(all[k]);
  }
}

/* ---- 10,000 alive at once --------------------------------------------------- */

#define NALIVE 10000

static void *two_phase_fn(void *arg)
{
  uint64_t i = (uint64_t)(uintptr_t)arg;
  uint64_t before = i * 2654435761u + 1; /* lives on this stack across the suspend */
  weft__coro_suspend(weft__coro_self());
  return (void *)(uintptr_t)(before ^ (i << 32));
}

Test(coro, ten_thousand_alive, .timeout = 90)
{
  weft__stack_counters c0, c1;
  weft__stack_get_counters(&c0);
  weft__coro **cos = calloc(NALIVE, sizeof(*cos));
  cr_assert_not_null(cos);
  for (uint64_t i = 0; i < NALIVE; i++)
    cos[i] = make(two_phase_fn, (void *)(uintptr_t)i, WEFT__STACK_MIN, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live + c1.slab_live, c0.guarded_live + c0.slab_live + NALIVE);

  for (int i = 0; i < NALIVE; i++)
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_SUSPENDED, "coroutine %d", i);
  /* Finish them in reverse, so neighbours' stacks are touched out of order. */
  for (int i = NALIVE - 1; i >= 0; i--) {
    cr_assert_eq(weft__coro_resume(cos[i]), WEFT__CORO_FINISHED, "coroutine %d", i);
    uint64_t want = ((uint64_t)i * 2654435761u + 1) ^ ((uint64_t)i << 32);
    cr_assert_eq((uint64_t)(uintptr_t)cos[i]->ret, want, "coroutine %d", i);
  }
  for (int i = 0; i < NALIVE; i++)
    weft__coro_destroy(cos[i]);
  free(cos);

  weft__stack_cache_drain();
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.guarded_live, c0.guarded_live, "guarded stacks leaked");
  cr_assert_eq(c1.slab_live, c0.slab_live, "slab stacks leaked");
}

/* ---- the stack cache -------------------------------------------------------- */

Test(coro, stack_cache_reuse, .timeout = 30)
{
  weft__stack_counters c0, c1, c2;
  weft__coro *co = make(ret_arg_fn, NULL, STACK, NULL);
  weft__coro_destroy(co);
  weft__stack_get_counters(&c0);

  weft__coro *again = make(ret_arg_fn, NULL, STACK, NULL);
  weft__stack_get_counters(&c1);
  cr_assert_eq(c1.mmaps, c0.mmaps, "a cached stack of the same size must be reused");
  cr_assert_eq(c1.cache_hits, c0.cache_hits + 1);
  cr_assert_eq(again, co, "the one cached stack comes back (same object address)");
  cr_assert_eq(weft__coro_resume(again), WEFT__CORO_FINISHED, "a reused stack must work");
  weft__coro_destroy(again);

  /* Another size does not take it. */
  weft__coro *big = make(ret_arg_fn, NULL, 2 * STACK, NULL);
  weft__stack_get_counters(&c2);
  cr_assert_eq(c2.mmaps, c1.mmaps + 1);
  cr_assert_eq(c2.cache_hits, c1.cache_hits);
  weft__coro_destroy(big);

  /* With no room in the cache a freed stack goes back to the system. */
  weft__stack_cache_drain();
  weft__stack_set_cache_limit(0);
  weft__stack_get_counters(&c1);
  co = make(ret_arg_fn, NULL, STACK, NULL);
  bool slab = co->stack.kind == WEFT__STACK_SLAB;
  weft__coro_destroy(co);
  weft__stack_get_counters(&c2);
  if (slab) {
    /* Back to its slab's free slots (the drained cache put it there first). */
    cr_assert_eq(c2.mmaps, c1.mmaps);
    cr_assert_eq(c2.slab_live, c1.slab_live);
  } else {
    cr_assert_eq(c2.mmaps, c1.mmaps + 1);
    cr_assert_eq(c2.munmaps, c1.munmaps + 1);
  }
  cr_assert_eq(c2.guarded_live, c1.guarded_live);
  weft__stack_set_cache_limit(64);
}

/* ---- one coroutine, two threads --------------------------------------------- */

struct hop {
  weft__coro *co;
  pthread_t thread[2];       /* pthread_self() seen by each step */
  weft__coro *self[2];       /* weft__coro_self() seen by each step */
  uint64_t locals_ok;
};

static void *hop_fn(void *arg)
{
  struct hop *h = arg;
  uint64_t a = 0xA5A5, b = 0x5A5A5A, c = 12345;
  char buf[64];
  memset(buf, 0x3C, sizeof(buf));
  h->thread[0] = pthread_self();
  h->self[0] = weft__coro_self();
  weft__coro_suspend(h->self[0]);
  /* Now on the other thread: the thread-local "current" must be re-read. */
  h->thread[1] = pthread_self();
  h->self[1] = weft__coro_self();
  int buf_ok = 1;
  for (size_t i = 0; i < sizeof(buf); i++)
    buf_ok &= buf[i] == 0x3C;
  h->locals_ok = buf_ok && a == 0xA5A5 && b == 0x5A5A5A && c == 12345;
  return (void *)(uintptr_t)(a + b + c);
}

struct resumer {
  weft__coro *co;
  int result;
  weft__coro *self_after;  /* weft__coro_self() on that thread after resume */
};

static void *resumer_main(void *arg)
{
  struct resumer *r = arg;
  r->result = weft__coro_resume(r->co);
  r->self_after = weft__coro_self();
  return NULL;
}

Test(coro, resumed_from_two_threads, .timeout = 30)
{
  struct hop h = {0};
  h.co = make(hop_fn, &h, STACK, "hopper");
  struct resumer ra = {.co = h.co, .result = -1}, rb = {.co = h.co, .result = -1};
  pthread_t ta, tb;

  cr_assert_eq(pthread_create(&ta, NULL, resumer_main, &ra), 0);
  cr_assert_eq(pthread_join(ta, NULL), 0);
  cr_assert_eq(ra.result, WEFT__CORO_SUSPENDED);
  cr_assert_null(ra.self_after);

  cr_assert_eq(pthread_create(&tb, NULL, resumer_main, &rb), 0);
  cr_assert_eq(pthread_join(tb, NULL), 0);
  cr_assert_eq(rb.result, WEFT__CORO_FINISHED);
  cr_assert_null(rb.self_after);

  cr_assert(pthread_equal(h.thread[0], ta));
  cr_assert(pthread_equal(h.thread[1], tb));
  cr_assert_eq(h.self[0], h.co);
  cr_assert_eq(h.self[1], h.co);
  cr_assert_eq(h.locals_ok, 1);
  cr_assert_eq((uintptr_t)h.co->ret, 0xA5A5 + 0x5A5A5A + 12345);
  cr_assert_null(weft__coro_self());
  weft__coro_destroy(h.co);
}

/* ---- nesting and embedding -------------------------------------------------- */

struct nest {
  weft__coro *outer, *inner;
  weft__coro *seen[4];
  int inner_states[2];
};

static void *inner_fn(void *arg)
{
  struct nest *n = arg;
  n->seen[1] = weft__coro_self();
  weft__coro_suspend(n->seen[1]);
  n->seen[3] = weft__coro_self();
  return NULL;
}

static void *outer_fn(void *arg)
{
  struct nest *n = arg;
  n->inner_states[0] = weft__coro_resume(n->inner);
  n->seen[0] = weft__coro_self(); /* back in outer after inner suspended */
  n->inner_states[1] = weft__coro_resume(n->inner);
  n->seen[2] = weft__coro_self();
  return NULL;
}

Test(coro, nested_resume_restores_self, .timeout = 30)
{
  struct nest n = {0};
  n.outer = make(outer_fn, &n, STACK, "outer");
  n.inner = make(inner_fn, &n, STACK, "inner");
  cr_assert_eq(weft__coro_resume(n.outer), WEFT__CORO_FINISHED);
  cr_assert_eq(n.inner_states[0], WEFT__CORO_SUSPENDED);
  cr_assert_eq(n.inner_states[1], WEFT__CORO_FINISHED);
  cr_assert_eq(n.seen[0], n.outer);
  cr_assert_eq(n.seen[1], n.inner);
  cr_assert_eq(n.seen[2], n.outer);
  cr_assert_eq(n.seen[3], n.inner);
  cr_assert_null(weft__coro_self());
  weft__coro_destroy(n.inner);
  weft__coro_destroy(n.outer);
}

/* A caller's object wrapped around the coroutine (obj_size) sits at the top
 * of the stack, above every frame: deep frames must not reach it. */
struct task_like {
  weft__coro co;        /* first member, as the header requires */
  uint64_t guard[16];
};

static void *fill_fn(void *arg)
{
  volatile char buf[16384];
  for (size_t k = 0; k < sizeof(buf); k++)
    buf[k] = (char)0xEE;
  struct task_like *t = (struct task_like *)weft__coro_self();
  return (void *)(uintptr_t)(t->guard[0] + (uint64_t)(unsigned char)buf[100] + (uint64_t)(uintptr_t)arg);
}

Test(coro, embedded_object_above_frames, .timeout = 30)
{
  weft__coro *co = NULL;
  weft__coro_opts o = {.fn = fill_fn, .arg = (void *)(uintptr_t)1, .stack_size = STACK,
                       .obj_size = sizeof(struct task_like)};
  cr_assert_eq(weft__coro_create(&co, &o), 0);
  cr_assert_eq((uintptr_t)co % alignof(max_align_t), 0);
  cr_assert((char *)co >= co->stack.base &&
            (char *)co + sizeof(struct task_like) <= co->stack.base + co->stack.size);
  struct task_like *t = (struct task_like *)co;
  for (int k = 0; k < 16; k++)
    t->guard[k] = 0x1111111111111111u * (uint64_t)(k + 1);
  cr_assert_eq(weft__coro_resume(co), WEFT__CORO_FINISHED);
  for (int k = 0; k < 16; k++)
    cr_assert_eq(t->guard[k], 0x1111111111111111u * (uint64_t)(k + 1), "guard[%d] clobbered", k);
  cr_assert_eq((uintptr_t)co->ret, 0x1111111111111111u + 0xEE + 1);
  weft__coro_destroy(co);
}
