/* A main thread woken by other threads, not by a timer: it starts short-lived
 * threads one after another and joins each (the exiting thread wakes it).
 * Each thread sleeps 1 ms before it exits, so main is woken a few hundred
 * times per second, steadily, and uses little CPU. */
#include <pthread.h>
#include <time.h>
#include "common.h"

static void *short_lived(void *arg)
{
	(void)arg;
	struct timespec one_ms = {0, 1000 * 1000};
	nanosleep(&one_ms, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	while (scenario_running(end)) {
		pthread_t t;
		if (pthread_create(&t, NULL, short_lived, NULL))
			return 1;
		pthread_join(t, NULL);
	}
	return 0;
}
