/*
 * What one read of each clock a loop probe could use costs on this
 * machine: clock_gettime(CLOCK_MONOTONIC) through the vDSO, a bare rdtsc
 * and rdtscp (x86_64). The figures behind the probes' counter clock in
 * crates/sampler/src/platform/ticks.rs (BENCHMARKS.md, "Probes and
 * findings"). Three rounds of N reads each, ns per read.
 *
 * Build and run (x86_64):
 *   cc -O2 -o /tmp/clock_reads benches/c/clock_reads.c
 *   /tmp/clock_reads            # 20,000,000 reads of each, three rounds
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(void)
{
	const long n = 20000000;
	volatile uint64_t sink = 0;
	unsigned aux;
	for (int round = 0; round < 3; round++) {
		uint64_t t0 = mono_ns();
		for (long i = 0; i < n; i++)
			sink += mono_ns();
		uint64_t t1 = mono_ns();
		for (long i = 0; i < n; i++)
			sink += __rdtsc();
		uint64_t t2 = mono_ns();
		for (long i = 0; i < n; i++)
			sink += __rdtscp(&aux);
		uint64_t t3 = mono_ns();
		printf("clock_gettime(CLOCK_MONOTONIC) %.1f ns, rdtsc %.1f ns, rdtscp %.1f ns\n",
		       (double)(t1 - t0) / n, (double)(t2 - t1) / n, (double)(t3 - t2) / n);
	}
	return sink == 42 ? 1 : 0;
}
