/* wakemeter for libevent: instruments an event_base with a wakemeter loop
 * probe named "<prefix>:<backend>", e.g. "libevent:poll", so a busy-poller
 * finding names the backend the base chose (event_base_get_method).
 *
 * Two modes, chosen at compile time from the libevent headers:
 *
 * - libevent >= 2.2 (WM_LIBEVENT_HAS_EVWATCH is 1): wm_libevent_attach
 *   installs evwatch "prepare" and "check" watchers; the host's loop code
 *   (event_base_dispatch, event_base_loop) is unchanged. prepare gives the
 *   timeout libevent passes to the backend; check follows the wait, and the
 *   events are the callbacks the wait made active (I/O and signals; timers
 *   become active after check, so a timer wakeup counts 0 events).
 *
 * - libevent 2.1 (no evwatch): drive the loop with wm_libevent_loop(a, flags)
 *   / wm_libevent_dispatch(a) instead of event_base_loop / _dispatch. Each
 *   call runs event_base_loop(base, EVLOOP_ONCE | flags) between
 *   before_wait and after_wait. What it cannot see: the real timeout of a
 *   blocking iteration (reported as "none"; EVLOOP_NONBLOCK is reported as
 *   0), the number of ready events (1 for a blocking iteration that ran
 *   callbacks, 0 for a non-blocking one), and the split between waiting and
 *   running callbacks (callback time counts as waiting), nor iterations of
 *   loops it does not drive.
 *
 * Build: compile wakemeter_libevent.c with your program, link -levent and
 * the wakemeter library. One adapter per base; use it on the base's thread.
 */
#ifndef WAKEMETER_LIBEVENT_H
#define WAKEMETER_LIBEVENT_H

#include <event2/event.h>
#include "wakemeter.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wm_libevent wm_libevent;

/* 1 when built against libevent >= 2.2 (evwatch hooks), else 0. */
int wm_libevent_has_evwatch(void);

/* Instruments `base` with a loop probe of `sampler` named
 * "<prefix>:<event_base_get_method(base)>" (prefix NULL = "libevent").
 * With evwatch, installs the watchers. *out is the adapter or NULL. */
wm_status wm_libevent_attach(wm_sampler *sampler, struct event_base *base,
                             const char *prefix, wm_libevent **out);

/* One instrumented iteration: event_base_loop(base, EVLOOP_ONCE | flags)
 * between before_wait and after_wait (with evwatch: the watchers measure,
 * this only runs the loop). *result (may be NULL) gets event_base_loop's
 * return value: 0 ran, 1 no events pending, -1 error. */
wm_status wm_libevent_loop(wm_libevent *a, int flags, int *result);

/* Runs instrumented iterations until no events are pending or the loop is
 * broken (event_base_loopbreak / loopexit): event_base_dispatch's drop-in. */
wm_status wm_libevent_dispatch(wm_libevent *a, int *result);

/* The backend the base chose, e.g. "epoll", "poll" (static string). */
const char *wm_libevent_method(const wm_libevent *a);

/* The probe's name, e.g. "libevent:poll" (valid until detach). */
const char *wm_libevent_probe_name(const wm_libevent *a);

/* The loop probe (owned by the adapter). */
wm_loop_probe *wm_libevent_probe(const wm_libevent *a);

/* Removes the watchers and frees the probe and the adapter; before
 * event_base_free. NULL is a no-op. */
wm_status wm_libevent_detach(wm_libevent *a);

#ifdef __cplusplus
}
#endif

#endif /* WAKEMETER_LIBEVENT_H */
