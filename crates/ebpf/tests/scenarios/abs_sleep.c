/* A deadline loop on CLOCK_REALTIME: clock_nanosleep(TIMER_ABSTIME) to a
 * deadline 5 ms after the previous one (200 sleeps/s). */
#include <time.h>
#include "common.h"

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	struct timespec next;
	clock_gettime(CLOCK_REALTIME, &next);
	while (scenario_running(end)) {
		next.tv_nsec += 5 * 1000 * 1000;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec += 1;
		}
		clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &next, NULL);
	}
	return 0;
}
