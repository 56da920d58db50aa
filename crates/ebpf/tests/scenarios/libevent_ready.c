/* libevent with an eventfd added as EV_READ|EV_PERSIST|EV_ET, written once
 * and never drained. On the epoll backend (edge-triggered) the callback runs
 * once and the loop blocks. On the poll or select backend (EVENT_NOEPOLL=1),
 * which cannot do edge triggering, every poll(2) returns the still-readable
 * eventfd at once: the loop never blocks, although each poll has a timeout
 * (the loop runs one second at a time). A 2 ms timer, as a proxy has,
 * gives the epoll control work the test can wait for: it wakes 500 times
 * a second and blocks in between. Built with -levent. */
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "common.h"

/* Callbacks run: one per poll(2) that returned the eventfd, the program's
 * own count to hold wakemeter's poll rate against. */
static unsigned long callbacks;

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	callbacks++;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	uint64_t one = 1;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0 || write(efd, &one, sizeof one) != (ssize_t)sizeof one)
		return 1;
	struct event_base *base = event_base_new();
	if (!base)
		return 1;
	struct event *ready = event_new(base, efd, EV_READ | EV_PERSIST | EV_ET, on_ready, NULL);
	if (!ready || event_add(ready, NULL))
		return 1;
	struct timeval two_ms = {0, 2000};
	struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
	if (!tick || event_add(tick, &two_ms))
		return 1;
	while (scenario_running(end)) {
		/* Every wait is bounded by this timer: a non-zero timeout. */
		struct timeval second = {1, 0};
		event_base_loopexit(base, &second);
		event_base_dispatch(base);
	}
	printf("callbacks %lu\n", callbacks);
	event_free(tick);
	event_free(ready);
	event_base_free(base);
	close(efd);
	return 0;
}
