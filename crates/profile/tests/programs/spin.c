// Known on-CPU answer: of its busy time, spin_here burns 70%, light_work
// 10% and other_work 20%. Build with -g -fno-omit-frame-pointer.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* CPU time of this thread: the shares hold even when other work on the
 * machine preempts the program. */
static long long cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

volatile unsigned long sink;

__attribute__((noinline)) static void burn(long long ns)
{
	long long end = cpu_ns() + ns;
	do {
		for (int i = 0; i < 20000; i++)
			sink += i;
	} while (cpu_ns() < end);
}

/* Units of 370 us: a period that does not divide a 99 Hz sampling period. */
#define UNIT_NS 370000LL

__attribute__((noinline)) void spin_here(void) { burn(7 * UNIT_NS); }
__attribute__((noinline)) void light_work(void) { burn(1 * UNIT_NS); }
__attribute__((noinline)) void other_work(void) { burn(2 * UNIT_NS); }

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	long long end = now_ns() + (long long)(seconds * 1e9);
	printf("ready\n");
	fflush(stdout);
	while (now_ns() < end) {
		spin_here();
		light_work();
		other_work();
	}
	return 0;
}
