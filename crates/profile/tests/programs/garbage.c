// A thread whose %rbp holds no frame pointer while it sleeps and while it
// spins, as in code built without frame pointers where %rbp is a general
// register: it points at data on the stack, so a frame-pointer walk reads
// the `tv_nsec` of its sleep (0x4c4b40) and a buffer's bytes
// (0x6161616161616161) as return addresses. A profiler must cut the stack
// there, never show those words as callers. x86_64 only; build with
// -O1 -fomit-frame-pointer.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

volatile uint64_t sink;

__attribute__((noinline)) static void sleep_with_data_in_rbp(void)
{
	// Fake frames: {next frame, return address}: a walk from %rbp reads
	// 0x4c4b40, then 0x6161616161616161, then stops at a null frame.
	uint64_t frames[4];
	struct timespec ts = {0, 5000000}; // 5 ms: tv_nsec 0x4c4b40
	frames[0] = (uint64_t)&frames[2];
	frames[1] = (uint64_t)ts.tv_nsec;
	memset(&frames[2], 'a', 2 * sizeof(uint64_t));
	frames[2] = 0;
	long ret;
	__asm__ volatile(
		"push %%rbp\n\t"
		"mov %[fake], %%rbp\n\t"
		"syscall\n\t"
		"pop %%rbp"
		: "=a"(ret)
		: "a"(35L /* nanosleep */), "D"(&ts), "S"(0L), [fake] "r"(frames)
		: "rcx", "r11", "memory");
	sink += (uint64_t)ret;
}

__attribute__((noinline)) static void spin_with_data_in_rbp(void)
{
	uint64_t frames[4];
	memset(frames, 'a', sizeof frames);
	frames[2] = 0;
	__asm__ volatile(
		"push %%rbp\n\t"
		"mov %[fake], %%rbp\n\t"
		"mov $2000000, %%ecx\n"
		"1:\n\t"
		"dec %%ecx\n\t"
		"jnz 1b\n\t"
		"pop %%rbp"
		:
		: [fake] "r"(frames)
		: "rcx", "memory");
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		sleep_with_data_in_rbp();
		spin_with_data_in_rbp();
	}
}
