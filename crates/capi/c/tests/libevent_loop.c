/* A libevent program instrumented by the wakemeter adapter.
 *   libevent_loop spin    BACKEND  - zero-timeout event_base_loop in a loop
 *                                     (the Envoy Mobile failure mode): must be
 *                                     flagged busy_poller, naming BACKEND
 *   libevent_loop healthy BACKEND  - a 100 ms timer, blocking: no busy_poller
 *   libevent_loop ready   BACKEND  - an eventfd written once and added with
 *                                     EV_READ|EV_PERSIST|EV_ET, blocking
 *                                     dispatch: the poll backend cannot do
 *                                     edge triggering, so every poll returns it
 *                                     ready at once and the loop never blocks
 *                                     (busy_poller "ready at once", naming
 *                                     BACKEND); epoll fires it once (quiet)
 * BACKEND is what event_base_get_method must say (set EVENT_NOEPOLL=1 for
 * "poll"). Runs ~2.5 s under a background sampler with short windows. */
#include <event2/event.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "wakemeter_libevent.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int ticks = 0;
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    ticks++;
}
static long readies = 0;
static void on_ready(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg;
    readies++; /* never drained: the eventfd stays readable */
}
static void on_end(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what;
    event_base_loopbreak((struct event_base *)arg);
}

int main(int argc, char **argv) {
    const double run_s = 2.5;
    int spin, ready;
    int efd = -1;
    struct event *readable = NULL;
    const char *backend;
    wm_config cfg;
    wm_sampler *s = NULL;
    wm_libevent *a = NULL;
    wm_findings *fs = NULL;
    size_t n = 0;
    int busy = 0, busy_names_backend = 0, busy_ready = 0;
    struct event_base *base;
    struct event *tick, *end;
    struct timeval every = {0, 100 * 1000}, total = {2, 500 * 1000};

    if (argc != 3) {
        fprintf(stderr, "usage: %s spin|healthy|ready BACKEND\n", argv[0]);
        return 2;
    }
    spin = strcmp(argv[1], "spin") == 0;
    ready = strcmp(argv[1], "ready") == 0;
    backend = argv[2];

    /* Short windows so the findings rules answer within the run. */
    wm_config_default(&cfg);
    cfg.interval_ns = 100u * 1000 * 1000;
    cfg.window_ns = 2000u * 1000 * 1000;
    cfg.min_window_ns = 1000u * 1000 * 1000;
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_OK);
    CHECK_STATUS(wm_sampler_start(s), WM_OK);

    base = event_base_new();
    CHECK(base != NULL);
    CHECK_STATUS(wm_libevent_attach(s, base, NULL, &a), WM_OK);
    if (a == NULL || base == NULL) return 1;
    printf("backend %s, probe \"%s\", evwatch %d\n", wm_libevent_method(a),
           wm_libevent_probe_name(a), wm_libevent_has_evwatch());
    CHECK(strcmp(wm_libevent_method(a), backend) == 0);

    tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    event_add(tick, &every);
    end = event_new(base, -1, 0, on_end, base);
    event_add(end, &total);

    if (ready) {
        uint64_t one = 1;
        efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        CHECK(efd >= 0);
        CHECK(write(efd, &one, sizeof one) == (ssize_t)sizeof one);
        readable = event_new(base, efd, EV_READ | EV_PERSIST | EV_ET, on_ready, NULL);
        CHECK(readable != NULL);
        CHECK(event_add(readable, NULL) == 0);
    }
    if (spin) {
        double stop = now_s() + run_s;
        while (now_s() < stop)
            CHECK_STATUS(wm_libevent_loop(a, EVLOOP_NONBLOCK, NULL), WM_OK);
    } else {
        CHECK_STATUS(wm_libevent_dispatch(a, NULL), WM_OK);
    }
    CHECK(ticks > 0);
    if (ready) printf("EV_ET callback ran %ld times\n", readies);

    CHECK_STATUS(wm_sampler_stop(s), WM_OK);
    CHECK_STATUS(wm_sampler_sample(s), WM_OK);
    CHECK_STATUS(wm_sampler_findings(s, &fs), WM_OK);
    CHECK_STATUS(wm_findings_count(fs, &n), WM_OK);
    for (size_t i = 0; i < n; i++) {
        wm_finding f;
        CHECK_STATUS(wm_findings_get(fs, i, &f), WM_OK);
        printf("  [%s] %s (%s \"%s\"): %s\n", f.severity, f.kind, f.subject_type,
               f.subject_name, f.summary);
        if (strcmp(f.kind, "busy_poller") == 0 && strcmp(f.subject_type, "loop") == 0) {
            busy = 1;
            /* The advice says which backend the base uses, e.g. "the 'poll' backend". */
            char quoted[64];
            snprintf(quoted, sizeof quoted, "'%s' backend", backend);
            if (strstr(f.summary, backend) && strstr(f.subject_name, backend) &&
                strstr(f.advice, quoted))
                busy_names_backend = 1;
            /* The cause: waits with a timeout that return ready at once, and the cure. */
            if (strstr(f.summary, "return ready at once") && strstr(f.summary, "never blocks") &&
                strstr(f.advice, "edge triggering"))
                busy_ready = 1;
        }
    }
    if (spin) {
        CHECK(busy);
        CHECK(busy_names_backend);
    } else if (ready && strcmp(backend, "epoll") != 0) {
        /* Level-triggered backend: the EV_ET event fires on every pass. */
        CHECK(readies > 10000);
        CHECK(busy);
        CHECK(busy_names_backend);
        CHECK(busy_ready);
    } else {
        /* Healthy, or EV_ET on epoll: it fired once and the loop blocks. */
        if (ready) CHECK(readies == 1);
        CHECK(!busy);
    }

    CHECK_STATUS(wm_findings_free(fs), WM_OK);
    CHECK_STATUS(wm_libevent_detach(a), WM_OK);
    if (readable) event_free(readable);
    if (efd >= 0) close(efd);
    event_free(tick);
    event_free(end);
    event_base_free(base);
    CHECK_STATUS(wm_sampler_free(s), WM_OK);
    if (wm_failures) {
        fprintf(stderr, "libevent_loop %s %s: %d failure(s)\n", argv[1], backend, wm_failures);
        return 1;
    }
    printf("libevent_loop %s %s: ok\n", argv[1], backend);
    return 0;
}
