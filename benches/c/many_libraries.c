// Loads shared libraries until `want` of them are mapped, then waits: a
// target with many mapped modules for the unwind-table attach bench.
// Usage: many_libraries WANT LIB... (prints "ready N" with the count
// loaded, then sleeps until killed). Build: cc -O1 many_libraries.c -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int want = argc > 1 ? atoi(argv[1]) : 0, loaded = 0;
	for (int i = 2; i < argc && loaded < want; i++)
		if (dlopen(argv[i], RTLD_LAZY | RTLD_LOCAL))
			loaded++;
	printf("ready %d\n", loaded);
	fflush(stdout);
	for (;;)
		pause();
}
