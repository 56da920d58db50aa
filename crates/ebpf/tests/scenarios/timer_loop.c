/* A libuv-style event loop with a 1 ms repeating timer and no I/O: before
 * each blocking epoll_pwait it makes a zero-timeout one (libuv's pre-poll
 * when the timer is due), and every timer expiry finds no fd ready. It
 * blocks almost all the time: a periodic waker, not a busy poller. */
#include <sys/epoll.h>
#include <unistd.h>
#include "common.h"

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	int fds[2];
	if (pipe(fds))
		return 1;
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[0]};
	epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev);
	struct epoll_event out[8];
	while (scenario_running(end)) {
		epoll_pwait(ep, out, 8, 0, NULL);
		epoll_pwait(ep, out, 8, 1, NULL);
	}
	return 0;
}
