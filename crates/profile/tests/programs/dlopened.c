// A library the test program loads with dlopen after the capture started:
// three nested functions without frame pointers (build with -shared -fPIC
// -g -O1 -fomit-frame-pointer), the innermost burning CPU. Its frames can
// only be unwound from its .eh_frame.
#include <time.h>

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

volatile unsigned long lib_sink;

__attribute__((noinline)) void lib_spin(long long ns)
{
	long long end = cpu_ns() + ns;
	do {
		for (int i = 0; i < 20000; i++)
			lib_sink += i;
	} while (cpu_ns() < end);
}

__attribute__((noinline)) void lib_middle(long long ns)
{
	lib_spin(ns);
	lib_sink++;
}

__attribute__((noinline)) void lib_outer(long long ns)
{
	lib_middle(ns);
	lib_sink++;
}
