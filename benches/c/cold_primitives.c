/*
 * What the sampler's system calls cost when caches are cold: each
 * primitive is timed over all threads right after a sleep of GAP_MS, with
 * the calling thread's CPU clock (median of REPS rounds, ns per thread).
 * The figures behind the clock-first read order in platform/linux/mod.rs
 * (BENCHMARKS.md, "Cold samples").
 *
 * Build and run:
 *   cc -O2 -o /tmp/cold_primitives benches/c/cold_primitives.c -lpthread
 *   /tmp/cold_primitives THREADS GAP_MS ACTIVE(0|1) REPS    e.g. 256 1000 1 7
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4096
#define MAX_REPS 100

static int active;
static pid_t tids[MAX_THREADS];
static volatile int ready;

static void *worker(void *arg) {
  long i = (long)arg;
  tids[i] = gettid();
  __sync_fetch_and_add(&ready, 1);
  for (;;) {
    if (!active) {
      pause();
      continue;
    }
    volatile unsigned long x = 0;
    for (int k = 0; k < 1000; k++) x = x * 6364136223846793005ul + 1;
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, 0);
  }
  return 0;
}

static unsigned long long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static clockid_t thread_clock(pid_t tid) { return ((~(clockid_t)tid) << 3) | 6; }

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s THREADS GAP_MS ACTIVE REPS\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]), gap = atoi(argv[2]), reps = atoi(argv[4]);
  active = atoi(argv[3]);
  if (n < 1 || n > MAX_THREADS || reps < 1 || reps > MAX_REPS) return 2;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 65536);
  for (long i = 0; i < n; i++) {
    pthread_t t;
    pthread_create(&t, &attr, worker, (void *)i);
  }
  while (ready < n) usleep(1000);
  static int fds[MAX_THREADS];
  char path[64], buf[256];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tids[i]);
    fds[i] = open(path, O_RDONLY | O_CLOEXEC);
  }
  static double sched[MAX_REPS], clk[MAX_REPS], floor_[MAX_REPS], both[MAX_REPS];
  struct timespec g = {gap / 1000, (gap % 1000) * 1000000L}, ts;
  for (int r = 0; r < reps; r++) {
    nanosleep(&g, 0);
    unsigned long long t0 = cpu_ns();
    for (int i = 0; i < n; i++) pread(fds[i], buf, sizeof buf, 0);
    sched[r] = (cpu_ns() - t0) / (double)n;
    nanosleep(&g, 0);
    t0 = cpu_ns();
    for (int i = 0; i < n; i++) clock_gettime(thread_clock(tids[i]), &ts);
    clk[r] = (cpu_ns() - t0) / (double)n;
    nanosleep(&g, 0);
    t0 = cpu_ns();
    for (int i = 0; i < n; i++) syscall(SYS_getppid);
    floor_[r] = (cpu_ns() - t0) / (double)n;
    nanosleep(&g, 0);
    t0 = cpu_ns();
    for (int i = 0; i < n; i++) {
      clock_gettime(thread_clock(tids[i]), &ts);
      pread(fds[i], buf, sizeof buf, 0);
    }
    both[r] = (cpu_ns() - t0) / (double)n;
  }
  qsort(sched, reps, sizeof(double), cmp);
  qsort(clk, reps, sizeof(double), cmp);
  qsort(floor_, reps, sizeof(double), cmp);
  qsort(both, reps, sizeof(double), cmp);
  printf("threads=%d gap=%dms active=%d, ns per thread: schedstat pread %.0f, "
         "thread CPU clock %.0f, getppid %.0f, clock+schedstat %.0f\n",
         n, gap, active, sched[reps / 2], clk[reps / 2], floor_[reps / 2], both[reps / 2]);
  return 0;
}
