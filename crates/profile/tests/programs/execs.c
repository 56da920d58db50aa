// Spins for a while, then execs NEXT (argv[1]) with "after": the new
// image spins in other functions. A profiler that unwinds from tables
// built for the first image must not use them for the second: the second
// image's stacks come from another walk, or are cut, never made of the
// first image's rules. Built twice, the second time with -DPAD (another
// layout), and run without address randomization (setarch -R), the
// second image lies where the first did, so the first's rules would
// apply to its addresses. Build with -g -O1 -fomit-frame-pointer.
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

#ifdef PAD
/* Shifts every function below by a few KiB, with frames of other sizes. */
__attribute__((noinline)) void pad(void)
{
	volatile char big[4096];
	big[sink & 4095] = 1;
	sink += big[1];
	__asm__ volatile(".fill 8192, 1, 0x90");
}
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void burn_before(void) { for (int i = 0; i < 100000; i++) sink += i; }
__attribute__((noinline)) void spin_before(double until) { while (now() < until) burn_before(); }
__attribute__((noinline)) void burn_after(void) { for (int i = 0; i < 100000; i++) sink ^= i; }
__attribute__((noinline)) void spin_after(double until) { while (now() < until) burn_after(); }

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "after") == 0) {
#ifdef PAD
		pad();
#endif
		spin_after(now() + 600);
		return 0;
	}
	printf("ready\n");
	fflush(stdout);
	spin_before(now() + 1.5);
	if (argc > 1)
		execl(argv[1], argv[1], "after", (char *)NULL);
	perror("execl");
	return 1;
}
