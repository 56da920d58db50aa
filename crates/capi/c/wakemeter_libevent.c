/* libevent adapter of wakemeter: see include/wakemeter_libevent.h. */
#include "wakemeter_libevent.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(LIBEVENT_VERSION_NUMBER) && LIBEVENT_VERSION_NUMBER >= 0x02020000
#include <event2/watch.h>
#define WM_LIBEVENT_HAS_EVWATCH 1
#else
#define WM_LIBEVENT_HAS_EVWATCH 0
#endif

struct wm_libevent {
    struct event_base *base;
    wm_loop_probe *probe;
    const char *method;
    char name[65];
#if WM_LIBEVENT_HAS_EVWATCH
    struct evwatch *prepare;
    struct evwatch *check;
#endif
};

int wm_libevent_has_evwatch(void) { return WM_LIBEVENT_HAS_EVWATCH; }

#if WM_LIBEVENT_HAS_EVWATCH
static void wm_on_prepare(struct evwatch *w, const struct evwatch_prepare_cb_info *info, void *arg) {
    struct wm_libevent *a = arg;
    struct timeval tv;
    int64_t timeout_ns = -1; /* no timeout: block until an event */
    (void)w;
    if (evwatch_prepare_get_timeout(info, &tv))
        timeout_ns = (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
    (void)wm_loop_probe_before_wait(a->probe, timeout_ns);
}

static void wm_on_check(struct evwatch *w, const struct evwatch_check_cb_info *info, void *arg) {
    struct wm_libevent *a = arg;
    int active = event_base_get_num_events(a->base, EVENT_BASE_COUNT_ACTIVE);
    (void)w;
    (void)info;
    (void)wm_loop_probe_after_wait(a->probe, active > 0 ? (uint32_t)active : 0);
}
#endif

wm_status wm_libevent_attach(wm_sampler *sampler, struct event_base *base,
                             const char *prefix, wm_libevent **out) {
    struct wm_libevent *a;
    wm_status st;
    if (out == NULL || base == NULL) return WM_ERR_NULL;
    *out = NULL;
    a = calloc(1, sizeof *a);
    if (a == NULL) return WM_ERR_SAMPLER;
    a->base = base;
    a->method = event_base_get_method(base);
    snprintf(a->name, sizeof a->name, "%s:%s", prefix ? prefix : "libevent",
             a->method ? a->method : "unknown");
    st = wm_loop_probe_create(sampler, a->name, &a->probe);
    if (st != WM_OK) {
        free(a);
        return st;
    }
#if WM_LIBEVENT_HAS_EVWATCH
    a->prepare = evwatch_prepare_new(base, wm_on_prepare, a);
    a->check = evwatch_check_new(base, wm_on_check, a);
    if (a->prepare == NULL || a->check == NULL) {
        if (a->prepare) evwatch_free(a->prepare);
        if (a->check) evwatch_free(a->check);
        (void)wm_loop_probe_free(a->probe);
        free(a);
        return WM_ERR_SAMPLER;
    }
#endif
    *out = a;
    return WM_OK;
}

wm_status wm_libevent_loop(wm_libevent *a, int flags, int *result) {
    int r;
    if (a == NULL) return WM_ERR_NULL;
#if WM_LIBEVENT_HAS_EVWATCH
    r = event_base_loop(a->base, EVLOOP_ONCE | flags);
#else
    {
        wm_status st = wm_loop_probe_before_wait(a->probe, (flags & EVLOOP_NONBLOCK) ? 0 : -1);
        if (st != WM_OK) return st;
        r = event_base_loop(a->base, EVLOOP_ONCE | flags);
        /* A blocking EVLOOP_ONCE returns 0 only after running callbacks. */
        st = wm_loop_probe_after_wait(a->probe, (r == 0 && !(flags & EVLOOP_NONBLOCK)) ? 1 : 0);
        if (st != WM_OK) return st;
    }
#endif
    if (result) *result = r;
    return WM_OK;
}

wm_status wm_libevent_dispatch(wm_libevent *a, int *result) {
    int r = 0;
    if (a == NULL) return WM_ERR_NULL;
    for (;;) {
        wm_status st = wm_libevent_loop(a, 0, &r);
        if (st != WM_OK) return st;
        if (r != 0 || event_base_got_break(a->base) || event_base_got_exit(a->base)) break;
    }
    if (result) *result = r;
    return WM_OK;
}

const char *wm_libevent_method(const wm_libevent *a) { return a ? a->method : NULL; }

const char *wm_libevent_probe_name(const wm_libevent *a) { return a ? a->name : NULL; }

wm_loop_probe *wm_libevent_probe(const wm_libevent *a) { return a ? a->probe : NULL; }

wm_status wm_libevent_detach(wm_libevent *a) {
    wm_status st;
    if (a == NULL) return WM_OK;
#if WM_LIBEVENT_HAS_EVWATCH
    evwatch_free(a->prepare);
    evwatch_free(a->check);
#endif
    st = wm_loop_probe_free(a->probe);
    free(a);
    return st;
}
