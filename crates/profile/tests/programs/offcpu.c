// Known off-CPU sites. A request thread serves requests and writes a log
// line per request with write(2) into a small pipe that a slow reader
// drains, so it blocks in write; two lock threads take a mutex that the
// other holds for 0.5 ms, so they block in futex. Build with
// -g -fno-omit-frame-pointer.
//
// libc is built without frame pointers, so frame-pointer unwinding (ours
// and offcputime's) skips the direct caller of a blocking libc call: the
// user stacks show write called from request_thread, read from
// reader_thread, and the futex calls from lock_thread.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int log_pipe[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
volatile unsigned long sink;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) static void busy(long long ns)
{
	long long end = now_ns() + ns;
	while (now_ns() < end)
		sink++;
}

__attribute__((noinline)) void log_request(long n)
{
	char line[512];
	int len = snprintf(line, sizeof line, "served request %ld %0400d\n", n, 0);
	if (write(log_pipe[1], line, (size_t)len) < 0)
		perror("write");
}

__attribute__((noinline)) void contended_path(void)
{
	pthread_mutex_lock(&lock);
	busy(500000);
	pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) static void *request_thread(void *arg)
{
	(void)arg;
	for (long n = 0; !stop; n++)
		log_request(n);
	return NULL;
}

__attribute__((noinline)) static void *lock_thread(void *arg)
{
	(void)arg;
	while (!stop)
		contended_path();
	return NULL;
}

__attribute__((noinline)) static void *reader_thread(void *arg)
{
	(void)arg;
	char buf[4096];
	while (!stop) {
		if (read(log_pipe[0], buf, sizeof buf) < 0)
			break;
		usleep(2000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	if (pipe(log_pipe))
		return 1;
	fcntl(log_pipe[1], F_SETPIPE_SZ, 4096);
	pthread_t r, w, l1, l2;
	pthread_create(&r, NULL, reader_thread, NULL);
	pthread_create(&w, NULL, request_thread, NULL);
	pthread_create(&l1, NULL, lock_thread, NULL);
	pthread_create(&l2, NULL, lock_thread, NULL);
	printf("ready\n");
	fflush(stdout);
	usleep((useconds_t)(seconds * 1e6));
	stop = 1;
	_exit(0);
}
