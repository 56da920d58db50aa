/* Short-lived threads with a known count: after a line on stdin, starts
 * argv[2] threads one after another (each exits at once, joined before
 * the next starts), prints "done" and waits for stdin to close (or
 * argv[1] seconds). A sampler sees almost none of them alive. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "common.h"

static void *nothing(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	long n = argc > 2 ? atol(argv[2]) : 500;
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (long i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, nothing, NULL))
			return 1;
		pthread_join(t, NULL);
	}
	printf("done\n");
	fflush(stdout);
	while (scenario_running(end) && fgets(line, sizeof line, stdin))
		;
	return 0;
}
