/* A real busy poller: epoll_wait with a zero timeout in a loop, never blocking. */
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
	unsigned n = 0;
	while ((++n & 1023) || scenario_running(end))
		epoll_wait(ep, out, 8, 0);
	return 0;
}
