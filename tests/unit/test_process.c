/* SPDX-License-Identifier: MIT */
/*
 * weft_process_wait: children started with posix_spawn and waited for from
 * coroutines and plain threads - exit codes and deaths by signal in
 * waitpid's form, the shard running other coroutines meanwhile, deadline
 * and cancel (the child is left alone and reaped by the next wait), and the
 * pids that cannot be waited for. And fork() in a coroutine: the child has
 * no copy of the ring memory it could write into the parent's rings.
 */
#include "io_helpers.h"

#include "core.h"
#include "fault.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <spawn.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>

extern char **environ;

/* /bin/sh -c script, its stdin the read end of `in` if in >= 0. */
static pid_t spawn_sh(const char *script, int in)
{
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in >= 0)
    posix_spawn_file_actions_adddup2(&fa, in, 0);
  char *argv[] = {"sh", "-c", (char *)script, NULL};
  pid_t pid = -1;
  int r = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return r == 0 ? pid : -r;
}

struct waiter {
  pid_t pid;
  int64_t deadline;
  int status;
};

static void *waiter(void *arg)
{
  struct waiter *w = arg;
  return (void *)(intptr_t)weft_process_wait_dl(w->pid, &w->status, w->deadline);
}

static atomic_int ticks;

static void *ticker(void *arg)
{
  (void)arg;
  for (int i = 0; i < 5; i++) {
    weft_sleep(WEFT_MSEC);
    atomic_fetch_add(&ticks, 1);
  }
  return NULL;
}

static void *exits_main(void *arg)
{
  (void)arg;
  int status = -1;
  pid_t pid = spawn_sh("exit 3", -1);
  CO_CHECK(pid > 0);
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status));
  CO_EQ(WEXITSTATUS(status), 3);
  CO_EQ(weft_process_wait(pid, &status), -ECHILD); /* reaped: gone */

  pid = spawn_sh("kill -TERM $$", -1);
  CO_CHECK(pid > 0);
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFSIGNALED(status));
  CO_EQ(WTERMSIG(status), SIGTERM);

  pid = spawn_sh("exit 0", -1);
  CO_CHECK(pid > 0);
  CO_EQ(weft_process_wait(pid, NULL), 0); /* status not wanted */

  /* The shard runs other coroutines while one waits: the child (blocked
   * on its stdin) ends only after a ticker on the same shard has ticked. */
  int p[2];
  CO_EQ(io_pipe(p), 0);
  pid = spawn_sh("read x; exit 7", p[0]);
  CO_CHECK(pid > 0);
  struct waiter w = {.pid = pid, .deadline = WEFT_NO_DEADLINE};
  weft_task *wt, *tt;
  CO_EQ(io_spawn_on(&wt, 0, waiter, &w), 0);
  CO_EQ(io_spawn_on(&tt, 0, ticker, NULL), 0);
  CO_EQ(weft_join(tt, NULL), 0);
  CO_EQ(atomic_load(&ticks), 5);
  CO_EQ(rt_dump_count(NULL, " waiting"), 1); /* the waiter, still suspended */
  CO_EQ(write(p[1], "go\n", 3), 3);
  CO_EQ(rt_join_int(wt), 0);
  CO_CHECK(WIFEXITED(w.status));
  CO_EQ(WEXITSTATUS(w.status), 7);
  io_close_pipe(p);
  return NULL;
}

Test(process, exit_codes_and_signals_in_a_coroutine, .timeout = 30)
{
  rt_run(1, exits_main, NULL);
  rt_assert_clean();
}


/* A thread that tells its id, then waits until its pipe is closed. */
struct idle_thread {
  _Atomic pid_t tid;
  int p[2];
};

static void *idle_thread(void *arg)
{
  struct idle_thread *it = arg;
  atomic_store(&it->tid, gettid());
  char c;
  while (read(it->p[0], &c, 1) > 0)
    ;
  return NULL;
}

static void *gives_up_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  pid_t pid = spawn_sh("read x; exit 5", p[0]);
  CO_CHECK(pid > 0);

  /* The deadline passes: the child runs on, not reaped. */
  int status = -1;
  int64_t t0 = weft_now();
  CO_EQ(weft_process_wait_dl(pid, &status, t0 + 20 * WEFT_MSEC), -ETIMEDOUT);
  CO_CHECK(weft_now() >= t0 + 20 * WEFT_MSEC);
  CO_EQ(status, -1);
  CO_EQ(kill(pid, 0), 0);

  /* Cancelled while it waits (on the other shard): the same. */
  struct waiter w = {.pid = pid, .deadline = WEFT_NO_DEADLINE};
  io_cancel_while_waiting(1, waiter, &w);

  /* Ended now, but a passed deadline fails first and reaps nothing. */
  CO_EQ(write(p[1], "go\n", 3), 3);
  siginfo_t si;
  CO_EQ(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0); /* a zombie now */
  CO_EQ(weft_process_wait_dl(pid, &status, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_process_wait_dl(pid, &status, weft_now() + 10 * WEFT_SEC), 0);
  CO_EQ(WEXITSTATUS(status), 5);

  /* Pids that cannot be waited for. */
  CO_EQ(weft_process_wait(0, NULL), -EINVAL);
  CO_EQ(weft_process_wait(-1, NULL), -EINVAL);
  CO_EQ(weft_process_wait(getppid(), NULL), -ECHILD); /* alive, not ours */
  CO_EQ(weft_process_wait_dl(getppid(), NULL, weft_now() - 1), -ETIMEDOUT);
  CO_EQ(weft_process_wait(pid, NULL), -ECHILD);       /* reaped */
  CO_EQ(weft_process_wait(0x3ffffff0, NULL), -ECHILD); /* above pid_max */
  /* A thread of this process, not its leader, is no child either, though
   * pidfd_open refuses it otherwise (ENOENT or EINVAL). */
  struct idle_thread it = {.tid = 0};
  CO_EQ(pipe2(it.p, O_CLOEXEC), 0);
  pthread_t th;
  CO_EQ(pthread_create(&th, NULL, idle_thread, &it), 0);
  CO_CHECK(RT_POLL(atomic_load(&it.tid) != 0));
  CO_EQ(weft_process_wait(atomic_load(&it.tid), NULL), -ECHILD);
  io_close_pipe(it.p); /* the thread's read ends */
  CO_EQ(pthread_join(th, NULL), 0);

  /* A cancelled task fails at once, the child ended or not. */
  pid = spawn_sh("exit 0", -1);
  CO_CHECK(pid > 0);
  weft_cancel(weft_task_self());
  CO_EQ(weft_process_wait(pid, NULL), -ECANCELED);
  /* ... and before anything is asked of the pid: one that is no child of
   * ours gives -ECANCELED, not -ECHILD, as would a passed deadline. */
  CO_EQ(weft_process_wait(getppid(), NULL), -ECANCELED);
  CO_EQ(weft_process_wait_dl(getppid(), NULL, weft_now() - 1), -ECANCELED);
  io_close_pipe(p);
  /* Reaped here, on the thread, so that no zombie outlives the test. */
  CO_EQ(waitpid(pid, NULL, 0), pid);
  return NULL;
}

Test(process, deadline_cancel_and_bad_pids, .timeout = 30)
{
  rt_run(2, gives_up_main, NULL);
  rt_assert_clean();
}

Test(process, wait_on_a_plain_thread, .timeout = 30)
{
  int p[2];
  cr_assert_eq(io_pipe(p), 0);
  pid_t pid = spawn_sh("read x; exit 9", p[0]);
  cr_assert_gt(pid, 0);
  int status;
  cr_assert_eq(weft_process_wait_dl(pid, &status, weft_now() + 20 * WEFT_MSEC), -ETIMEDOUT);
  cr_assert_eq(write(p[1], "go\n", 3), 3);
  cr_assert_eq(weft_process_wait(pid, &status), 0);
  cr_assert(WIFEXITED(status));
  cr_assert_eq(WEXITSTATUS(status), 9);
  io_close_pipe(p);
}

/* ---- what a child inherits -------------------------------------------------------------- */

/* The SigBlk mask of a grep started (no shell: dash resets its mask) from
 * this thread with `attr`, read from its own /proc/self/status. */
static unsigned long long child_blocked(const posix_spawnattr_t *attr)
{
  int p[2];
  CO_EQ(io_pipe(p), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  char *argv[] = {"grep", "SigBlk", "/proc/self/status", NULL};
  pid_t pid = -1;
  CO_EQ(posix_spawn(&pid, "/bin/grep", &fa, attr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  char out[128] = {0};
  CO_CHECK(weft_read_full(p[0], out, sizeof(out) - 1) > 0);
  close(p[0]);
  int status = -1;
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unsigned long long mask = ~0ull;
  CO_EQ(sscanf(out, "SigBlk: %llx", &mask), 1);
  return mask;
}

/* process.h: a child started on a shard thread keeps that thread's SIGPIPE
 * block across exec; a mask of its own (POSIX_SPAWN_SETSIGMASK) undoes it. */
static void *sigmask_main(void *arg)
{
  (void)arg;
  const unsigned long long pipe_bit = 1ull << (SIGPIPE - 1);
  CO_EQ(child_blocked(NULL) & pipe_bit, pipe_bit);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  CO_EQ(child_blocked(&attr), 0);
  posix_spawnattr_destroy(&attr);
  return NULL;
}

Test(process, a_child_spawned_in_a_coroutine_has_sigpipe_blocked, .timeout = 30)
{
  rt_run(1, sigmask_main, NULL);
  rt_assert_clean();
}

/* ---- fork in a coroutine --------------------------------------------------------------- */


/* 1 if the page holding p is mapped in this process, 0 if not. */
static int mapped(const void *p)
{
  uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
  return msync((void *)page, 4096, MS_ASYNC) == 0 ? 1 : 0;
}

static void *fork_main(void *arg)
{
  (void)arg;
  weft__shard *sh = weft__shard_self();
  const void *sq = sh->ring.sq.ring_ptr, *sqes = sh->ring.sq.sqes;
  CO_EQ(mapped(sq), 1);
  CO_EQ(mapped(sqes), 1);
  pid_t pid = fork();
  if (pid == 0) /* the child: the parent's ring memory is not here */
    _exit(mapped(sq) * 10 + mapped(sqes));
  CO_CHECK(pid > 0);
  int status = -1;
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status));
  CO_EQ(WEXITSTATUS(status), 0);
  /* The parent's ring works as before. */
  CO_EQ(weft_nop(), 0);
  int p[2];
  CO_EQ(io_pipe(p), 0);
  CO_EQ(weft_write(p[1], "k", 1), 1);
  char c = 0;
  CO_EQ(weft_read(p[0], &c, 1), 1);
  CO_EQ(c, 'k');
  io_close_pipe(p);
  return NULL;
}

Test(process, a_forked_child_gets_no_ring_memory, .timeout = 30)
{
  rt_run(1, fork_main, NULL);
  rt_assert_clean();
}

/* No descriptor for the pidfd: -EMFILE, and the child is left for the next
 * wait. The open-file limit is lowered to the lowest free descriptor. */
static void *emfile_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  pid_t pid = spawn_sh("read x; exit 4", p[0]);
  CO_CHECK(pid > 0);
  struct rlimit rl, low;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  int lowest = dup(0);
  CO_CHECK(lowest >= 0);
  close(lowest);
  low = rl;
  low.rlim_cur = (rlim_t)lowest;
  CO_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  int status = -1;
  int r = weft_process_wait(pid, &status);
  CO_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  CO_EQ(r, -EMFILE);
  CO_EQ(status, -1);
  CO_EQ(write(p[1], "go\n", 3), 3);
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4);
  io_close_pipe(p);
  return NULL;
}

Test(process, no_descriptor_for_the_pidfd_is_emfile, .timeout = 30)
{
  emfile_main(NULL); /* a plain thread */
  rt_assert_clean();
  rt_run(1, emfile_main, NULL);
  rt_assert_clean();
}

/* No memory for the deadline's timer (the shard's heap has no array yet):
 * -ENOMEM, as for every weft call with a deadline (weft/io.h), and the
 * child is left for the next wait. */
static void *no_timer_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  pid_t pid = spawn_sh("read x; exit 5", p[0]);
  CO_CHECK(pid > 0);
  int status = -1;
  weft__fault_arm(WEFT__FAULT_MALLOC, 1);
  int r = weft_process_wait_dl(pid, &status, weft_now() + 10 * WEFT_SEC);
  long unfired = atomic_load(&weft__fault_countdown[WEFT__FAULT_MALLOC]);
  weft__fault_arm(WEFT__FAULT_MALLOC, 0);
  CO_EQ(unfired, 0);
  CO_EQ(r, -ENOMEM);
  CO_EQ(status, -1);
  CO_EQ(write(p[1], "go\n", 3), 3);
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 5);
  io_close_pipe(p);
  return NULL;
}

Test(process, no_memory_for_the_deadline_timer_is_enomem, .timeout = 30)
{
  rt_run(1, no_timer_main, NULL);
  rt_assert_clean();
}

/* No SQE for the pidfd's poll even after a submit (the shard's SQ stays
 * full): weft_poll's -EBUSY, and the child is left for the next wait. */
static void *no_sqe_main(void *arg)
{
  (void)arg;
  int p[2];
  CO_EQ(io_pipe(p), 0);
  pid_t pid = spawn_sh("read x; exit 6", p[0]);
  CO_CHECK(pid > 0);
  int status = -1;
  weft__fault_arm(WEFT__FAULT_OP_SQ, 1);
  int r = weft_process_wait(pid, &status);
  weft__fault_arm(WEFT__FAULT_OP_SQ, 0);
  CO_EQ(r, -EBUSY);
  CO_EQ(status, -1);
  CO_EQ(write(p[1], "go\n", 3), 3);
  CO_EQ(weft_process_wait(pid, &status), 0);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 6);
  io_close_pipe(p);
  return NULL;
}

Test(process, no_sqe_for_the_poll_is_ebusy, .timeout = 30)
{
  rt_run(1, no_sqe_main, NULL);
  rt_assert_clean();
}

/* ---- kernels without pidfds ------------------------------------------------------------ */

/* From now on (every thread of this test's process, and its children)
 * system call `nr` fails with `err` - only when its first argument is
 * only_arg0, if that is >= 0: a kernel that lacks the call, or one of its
 * id types. */
static void refuse(long nr, int err, long only_arg0)
{
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)only_arg0, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  if (only_arg0 < 0)
    f[3] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 0); /* any argument */
  struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
  cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  cr_assert_eq(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog), 0);
}

/* Linux 5.3 has pidfd_open but no waitid on a pidfd (its EINVAL), 5.2 not
 * even pidfd_open: -ENOSYS either way, not an -EINVAL that says "pid <= 0";
 * the child is left for waitpid. */
static void *no_pidfd_main(void *arg)
{
  (void)arg;
  pid_t pid = spawn_sh("exit 2", -1);
  CO_CHECK(pid > 0);
  int status = -1;
  CO_EQ(weft_process_wait(pid, &status), -ENOSYS);
  CO_EQ(status, -1);
  CO_EQ(waitpid(pid, &status, 0), pid);
  CO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  return NULL;
}

Test(process, a_kernel_without_waitid_on_a_pidfd_is_enosys, .timeout = 30)
{
  refuse(SYS_waitid, EINVAL, P_PIDFD);
  no_pidfd_main(NULL); /* a plain thread */
  rt_run(1, no_pidfd_main, NULL);
  rt_assert_clean();
}

Test(process, a_kernel_without_pidfd_open_is_enosys, .timeout = 30)
{
  refuse(SYS_pidfd_open, ENOSYS, -1);
  no_pidfd_main(NULL);
  rt_run(1, no_pidfd_main, NULL);
  rt_assert_clean();
}
