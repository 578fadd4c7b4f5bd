/* SPDX-License-Identifier: MIT */
/*
 * Suite "hook", the edges of libc's behaviour: arguments the kernel refuses
 * and the results of corner cases, each compared with what libc gives for
 * the same call (on a plain thread here, or as the man page says it).
 */
#include "io_helpers.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>

/* ---- poll's arguments ------------------------------------------------------------------- */

#define UNTOUCHED 0x7a5a /* revents no poll(2) ever writes */

/* More entries than the open-file limit: EINVAL, and the array is not
 * written (poll(2) refuses before it copies anything back) - the hook must
 * not write revents over entries the caller may not even have. A NULL
 * array is EFAULT, not a crash. */
static void poll_refused(void)
{
  struct rlimit rl;
  CO_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  nfds_t n = (nfds_t)rl.rlim_cur + 1;
  struct pollfd *fds = calloc(n, sizeof(*fds));
  CO_CHECK(fds != NULL);
  if (!fds)
    return;
  for (nfds_t i = 0; i < n; i++)
    fds[i] = (struct pollfd){.fd = -1, .revents = UNTOUCHED};
  errno = 0;
  CO_EQ(poll(fds, n, 0), -1);
  CO_EQ(errno, EINVAL);
  nfds_t written = 0;
  for (nfds_t i = 0; i < n; i++)
    written += fds[i].revents != UNTOUCHED;
  CO_EQ(written, 0);
  free(fds);
  struct pollfd *volatile none = NULL; /* hidden from the compiler's check */
  errno = 0;
  CO_EQ(poll(none, 1, 0), -1);
  CO_EQ(errno, EFAULT);
}

static void *poll_refused_main(void *arg)
{
  (void)arg;
  poll_refused();
  return NULL;
}

Test(hook, a_poll_the_kernel_refuses_writes_nothing, .timeout = 30)
{
  poll_refused(); /* libc's answers */
  rt_assert_clean();
  rt_run(1, poll_refused_main, NULL);
  rt_assert_clean();
}
