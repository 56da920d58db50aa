/*
 * A syscall-heavy target for measuring what watching it costs the target
 * itself (BENCHMARKS.md, "What watching costs the target"). One thread
 * makes syscalls back to back for SECONDS and prints the calls per second
 * it achieved, on stdout, as one number:
 *
 *   poll     poll(2) with a zero timeout on an empty pipe (a busy poller:
 *            the poll family, which the eBPF syscall program measures in
 *            full)
 *   getppid  getppid(2) (a call the eBPF program only filters)
 *
 * It waits for a line on stdin before starting, so a watcher can attach
 * first. Build and run:
 *   cc -O2 -o syscall_target benches/c/syscall_target.c
 *   echo | ./syscall_target poll 5
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "poll") && strcmp(argv[1], "getppid"))) {
		fprintf(stderr, "usage: %s poll|getppid SECONDS\n", argv[0]);
		return 2;
	}
	int use_poll = !strcmp(argv[1], "poll");
	double seconds = atof(argv[2]);
	int p[2];
	if (pipe(p))
		return 1;
	struct pollfd pfd = { .fd = p[0], .events = POLLIN };
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	unsigned long calls = 0;
	double start = now(), end = start + seconds, t = start;
	while (t < end) {
		for (int i = 0; i < 1000; i++) {
			if (use_poll)
				poll(&pfd, 1, 0);
			else
				getppid();
		}
		calls += 1000;
		t = now();
	}
	printf("%.0f\n", calls / (t - start));
	return 0;
}
