/* A thread that sleeps 10 ms at a time while a 1 kHz interval timer sends it
 * SIGALRM: almost every nanosleep returns EINTR after about 1 ms. The
 * wakeups come from the signals, not from a sleep-and-check loop. */
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include "common.h"

static void on_alarm(int sig) { (void)sig; }

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct timespec ten_ms = {0, 10 * 1000 * 1000};
	while (scenario_running(end))
		nanosleep(&ten_ms, NULL);
	return 0;
}
