// A stack deeper than the 127 frames kept: recurse 300 calls deep, then
// spin there. Build without frame pointers, so the kernel unwinds it from
// the .eh_frame table and stops at the depth limit.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) int descend(int depth, long long end)
{
	if (depth == 0) {
		while (now_ns() < end)
			for (int i = 0; i < 20000; i++)
				sink += i;
		return 0;
	}
	/* Not a tail call: the frame stays. */
	return descend(depth - 1, end) + (int)(sink & 1);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	printf("ready\n");
	fflush(stdout);
	return descend(300, now_ns() + (long long)(seconds * 1e9));
}
