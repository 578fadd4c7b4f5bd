/* SPDX-License-Identifier: MIT */
/*
 * Intrusive doubly-linked lists, written once. The element types differ and
 * one object may sit on several lists (a task is on its shard's list, its
 * group's and a run queue), each with link fields of its own, so these are
 * macros over the list's head (and tail) and the names of the link fields.
 * Every argument must be an lvalue without side effects: it is evaluated
 * more than once. Locking is the caller's.
 *
 *   WEFT__DLIST_*   a list known by its head; elements are added in front.
 *   WEFT__DQUEUE_*  a FIFO known by head and tail; elements go at the back.
 * Unlinking clears the element's links.
 */
#ifndef WEFT_CORO_DLIST_H
#define WEFT_CORO_DLIST_H

#include <stddef.h>

#define WEFT__DLIST_PUSH(head, n, prev, next)                                                  \
  do {                                                                                         \
    (n)->prev = NULL;                                                                          \
    (n)->next = (head);                                                                        \
    if (head)                                                                                  \
      (head)->prev = (n);                                                                      \
    (head) = (n);                                                                              \
  } while (0)

#define WEFT__DLIST_UNLINK(head, n, prev, next)                                                \
  do {                                                                                         \
    if ((n)->prev)                                                                             \
      (n)->prev->next = (n)->next;                                                             \
    else                                                                                       \
      (head) = (n)->next;                                                                      \
    if ((n)->next)                                                                             \
      (n)->next->prev = (n)->prev;                                                             \
    (n)->prev = (n)->next = NULL;                                                              \
  } while (0)

#define WEFT__DQUEUE_PUSH(head, tail, n, prev, next)                                           \
  do {                                                                                         \
    (n)->next = NULL;                                                                          \
    (n)->prev = (tail);                                                                        \
    if (tail)                                                                                  \
      (tail)->next = (n);                                                                      \
    else                                                                                       \
      (head) = (n);                                                                            \
    (tail) = (n);                                                                              \
  } while (0)

#define WEFT__DQUEUE_UNLINK(head, tail, n, prev, next)                                         \
  do {                                                                                         \
    if (!(n)->next)                                                                            \
      (tail) = (n)->prev;                                                                      \
    WEFT__DLIST_UNLINK(head, n, prev, next);                                                   \
  } while (0)

#endif
