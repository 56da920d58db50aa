/* Twenty identical workers ("worker-0" .. "worker-19"), each sleeping 5 ms
 * in a loop: one cause, twenty threads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include "common.h"

static double end;

static void *worker(void *arg)
{
	char name[16];
	snprintf(name, sizeof(name), "worker-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	struct timespec five_ms = {0, 5 * 1000 * 1000};
	while (scenario_running(end))
		nanosleep(&five_ms, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	end = scenario_deadline(argc, argv);
	pthread_t t[20];
	for (long i = 0; i < 20; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < 20; i++)
		pthread_join(t[i], NULL);
	return 0;
}
