/* The C host of issue 29: THREADS parked threads, history = 100000
 * snapshots, interval_ns = 1 ms, for SECONDS, with a history budget of
 * BUDGET bytes (0: the default). Before the byte budget it grew ~47 MB/s
 * and was OOM-killed in a 300 MB cgroup; scripts/memory-ceiling.sh runs it
 * in a memory cgroup and checks that it is not.
 * Prints its resident set each second and its peak at the end. */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>
#include "check.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static int stop = 0;

static void *park(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!stop) pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static long rss_kib(void) {
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1000;
    int seconds = argc > 2 ? atoi(argv[2]) : 10;
    unsigned long long budget = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    wm_sampler *s = NULL;
    wm_config cfg;
    long peak = 0;

    CHECK(t != NULL);
    for (int i = 0; i < threads; i++) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 * 1024);
        CHECK(pthread_create(&t[i], &a, park, NULL) == 0);
        pthread_attr_destroy(&a);
    }
    CHECK_STATUS(wm_config_default(&cfg), WM_OK);
    cfg.history = 100000;
    cfg.interval_ns = 1000000;
    if (budget) cfg.history_budget_bytes = budget;
    printf("threads=%d history=%u interval_ns=%llu history_budget_bytes=%llu\n", threads,
           cfg.history, (unsigned long long)cfg.interval_ns,
           (unsigned long long)cfg.history_budget_bytes);
    CHECK_STATUS(wm_sampler_create(&cfg, &s), WM_OK);
    CHECK_STATUS(wm_sampler_start(s), WM_OK);
    for (int i = 1; i <= seconds; i++) {
        sleep(1);
        long r = rss_kib();
        if (r > peak) peak = r;
        printf("t=%ds rss_kib=%ld\n", i, r);
        fflush(stdout);
    }
    CHECK_STATUS(wm_sampler_stop(s), WM_OK);
    CHECK_STATUS(wm_sampler_free(s), WM_OK);
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_cond_broadcast(&done);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    free(t);
    printf("peak_rss_kib=%ld\n", peak);
    return wm_failures ? 1 : 0;
}
