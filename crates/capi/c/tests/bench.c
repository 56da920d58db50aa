/* Cost of one probe wait pair through the C API
 * (wm_loop_probe_before_wait + wm_loop_probe_after_wait) against two
 * clock_gettime(CLOCK_MONOTONIC) calls, measured in the same run.
 * Usage: bench [iterations per round] ; prints the medians of 9 rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "wakemeter.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 9

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    double pair[ROUNDS], clocks[ROUNDS];
    volatile long sink = 0;
    wm_sampler *s = NULL;
    wm_loop_probe *p = NULL;
    if (n <= 0) n = 1;
    if (wm_sampler_create(NULL, &s) != WM_OK || wm_loop_probe_create(s, "bench", &p) != WM_OK) {
        fprintf(stderr, "setup failed: %s\n", wm_last_error());
        return 1;
    }
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            wm_loop_probe_before_wait(p, 0);
            wm_loop_probe_after_wait(p, 1);
        }
        double t1 = now_ns();
        for (long i = 0; i < n; i++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            clock_gettime(CLOCK_MONOTONIC, &b);
            sink += a.tv_nsec ^ b.tv_nsec;
        }
        double t2 = now_ns();
        pair[r] = (t1 - t0) / (double)n;
        clocks[r] = (t2 - t1) / (double)n;
    }
    qsort(pair, ROUNDS, sizeof pair[0], cmp);
    qsort(clocks, ROUNDS, sizeof clocks[0], cmp);
    printf("wait pair (C API): %.1f ns, two clock_gettime: %.1f ns, ratio %.2fx (median of %d rounds of %ld)\n",
           pair[ROUNDS / 2], clocks[ROUNDS / 2], pair[ROUNDS / 2] / clocks[ROUNDS / 2], ROUNDS, n);
    wm_loop_probe_free(p);
    wm_sampler_free(s);
    return (int)(sink & 0);
}
