// Thousands of distinct stacks: `descend` recurses 11 levels through one
// of two functions per level, chosen by the bits of a counter, and sleeps
// 20 us at the bottom: 2048 distinct user stacks, each blocking in
// nanosleep many times a second. A stack store that loses a stack when
// another occupies its hash bucket loses a good share of them. Build with
// -O1 -fno-omit-frame-pointer (the walk must see every level).
#include <stdio.h>
#include <time.h>

#define LEVELS 11

volatile unsigned long sink;

static void descend(unsigned path, int level);

__attribute__((noinline)) static void left(unsigned path, int level)
{
	descend(path, level + 1);
	sink++;
}

__attribute__((noinline)) static void right(unsigned path, int level)
{
	descend(path, level + 1);
	sink += 2;
}

__attribute__((noinline)) static void descend(unsigned path, int level)
{
	if (level == LEVELS) {
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
		return;
	}
	if (path & (1u << level))
		right(path, level);
	else
		left(path, level);
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (unsigned path = 0;; path = (path + 1) % (1u << LEVELS))
		descend(path, 0);
}
