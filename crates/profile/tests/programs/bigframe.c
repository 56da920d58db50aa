// A caller with a large frame, as Debian's memcached has above sendmsg
// (a 16 KiB buffer on the stack): with_buffer() keeps 20 KiB of locals and
// calls burn(), which spins. Build without frame pointers: the stacks are
// unwound from the .eh_frame table through a CFA of %rsp + 20,000 or so.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void burn(long long ns)
{
	long long end = cpu_ns() + ns;
	do {
		for (int i = 0; i < 20000; i++)
			sink += i;
	} while (cpu_ns() < end);
}

__attribute__((noinline)) void with_buffer(void)
{
	char buffer[20000];
	memset(buffer, (int)(sink & 0x7f), sizeof(buffer));
	burn(1000000);
	/* The buffer is used after the call: it stays in this frame. */
	sink += (unsigned char)buffer[sink % sizeof(buffer)];
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	printf("ready\n");
	fflush(stdout);
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		with_buffer();
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > seconds)
			return 0;
	}
}
