/*
 * A busy-polling event loop with a known answer: thread "poller" calls
 * epoll_wait with a zero timeout on an epoll set where nothing is ever
 * ready, from poll_forever, as fast as it can. wakemeter's finding must
 * name that thread, and the profile captured for it must name
 * poll_forever and epoll_wait. Like a real loop, poll_forever does a
 * little bookkeeping per turn (it walks its timer list), so that part of
 * the samples land in its own code: with a C library built without frame
 * pointers (Debian's), a sample taken inside epoll_wait unwinds to
 * poll_forever's caller, not to poll_forever. The main thread only sleeps.
 *
 * Usage: busypoll SECONDS   (prints "ready" once the poller runs)
 * Build: cc -g -O1 -fno-omit-frame-pointer busypoll.c -lpthread
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

volatile unsigned long idle_polls;
/* Deadlines of the loop's timers (none ever expires). */
volatile unsigned long timers[256];

__attribute__((noinline)) void poll_forever(int ep)
{
	struct epoll_event events[8];
	for (unsigned long turn = 0;; turn++) {
		int n = epoll_wait(ep, events, 8, 0);
		if (n == 0)
			idle_polls++;
		for (int i = 0; i < 256; i++)
			if (timers[i] == turn)
				timers[i] = ~0UL;
	}
}

static void *poller_main(void *arg)
{
	int ep = epoll_create1(0);
	int efd = eventfd(0, EFD_NONBLOCK);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = efd };
	if (ep < 0 || efd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0) {
		perror("epoll");
		exit(1);
	}
	(void)arg;
	poll_forever(ep);
	return NULL;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 30;
	pthread_t t;
	if (pthread_create(&t, NULL, poller_main, NULL) != 0)
		return 1;
	pthread_setname_np(t, "poller");
	printf("ready\n");
	fflush(stdout);
	sleep(seconds);
	return 0;
}
