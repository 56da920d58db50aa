// Prints "ready", waits for a line on stdin, then loads the library named
// by argv[1] with dlopen and spins in its lib_outer() for argv[2] seconds.
// Build with -g -O1 -fomit-frame-pointer -ldl.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 3;
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 4;
	}
	void (*outer)(long long) = (void (*)(long long))dlsym(lib, "lib_outer");
	if (!outer)
		return 5;
	printf("loaded\n");
	fflush(stdout);
	long long end = now_ns() + (long long)(atof(argv[2]) * 1e9);
	while (now_ns() < end)
		outer(1000000);
	return 0;
}
