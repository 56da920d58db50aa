/* Shared by the scenario programs: each runs for argv[1] seconds (default
 * 30), so a test that dies never leaves one behind for long. */
#include <stdlib.h>
#include <time.h>

static double scenario_deadline(int argc, char **argv)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	double secs = argc > 1 ? atof(argv[1]) : 30.0;
	return now.tv_sec + now.tv_nsec / 1e9 + secs;
}

static int scenario_running(double deadline)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec + now.tv_nsec / 1e9 < deadline;
}
