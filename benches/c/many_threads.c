/*
 * A target with many threads, mostly idle and a few busy: what a sidecar
 * watcher meets in a large proxy or a JVM. Used by scripts/sidecar-cost.sh
 * to compare the CPU of `wakemeter watch` with `pidstat -t` and `top -H`
 * watching the same process (BENCHMARKS.md, "Watching a process with
 * thousands of threads").
 *
 *   cc -O2 -pthread -o many_threads benches/c/many_threads.c
 *   ./many_threads THREADS BUSY WAKE_MS
 *
 * THREADS  threads in all, the main one included (2 to 20000)
 * BUSY     of them, how many work about 1 ms in every 10 ms ("busy-N")
 * WAKE_MS  the others ("worker-N"): 0 = blocked for good, else each wakes
 *          every WAKE_MS ms and goes back to sleep at once
 *
 * It prints "ready" on stdout once every thread runs, and exits when its
 * stdin closes (or on SIGTERM).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long wake_ms;
static volatile long started;
static pthread_mutex_t never_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

static void *busy(void *arg) {
  (void)arg;
  __sync_fetch_and_add(&started, 1);
  for (;;) {
    long until = now_ns() + 1000000L;
    volatile unsigned long x = 1;
    while (now_ns() < until) x = x * 6364136223846793005ul + 1;
    sleep_ns(9000000L);
  }
  return NULL;
}

static void *idle(void *arg) {
  long i = (long)arg;
  __sync_fetch_and_add(&started, 1);
  if (wake_ms <= 0) {
    pthread_mutex_lock(&never_lock);
    for (;;) pthread_cond_wait(&never, &never_lock);
  }
  /* Spread the wakeups over the period instead of waking all at once. */
  sleep_ns((i * 7919L % 1000L) * wake_ms * 1000L);
  for (;;) sleep_ns(wake_ms * 1000000L);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s THREADS BUSY WAKE_MS\n", argv[0]);
    return 2;
  }
  long threads = strtol(argv[1], NULL, 10);
  long n_busy = strtol(argv[2], NULL, 10);
  wake_ms = strtol(argv[3], NULL, 10);
  if (threads < 2 || threads > 20000 || n_busy < 0 || n_busy > threads - 1 || wake_ms < 0) {
    fprintf(stderr, "THREADS must be 2..20000, BUSY 0..THREADS-1, WAKE_MS >= 0\n");
    return 2;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  for (long i = 0; i < threads - 1; i++) {
    pthread_t t;
    int is_busy = i < n_busy;
    long n = is_busy ? i : i - n_busy;
    int err = pthread_create(&t, &attr, is_busy ? busy : idle, (void *)n);
    if (err) {
      fprintf(stderr, "pthread_create %ld: %s\n", i, strerror(err));
      return 1;
    }
    char name[16];
    snprintf(name, sizeof name, is_busy ? "busy-%ld" : "worker-%ld", n);
    pthread_setname_np(t, name);
  }
  while (started < threads - 1) sleep_ns(1000000L);
  printf("ready\n");
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}
