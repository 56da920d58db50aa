/* A busy poller on poll(2) (what libevent's poll backend does when it spins):
 * poll with a zero timeout in a loop. */
#include <poll.h>
#include <unistd.h>
#include "common.h"

int main(int argc, char **argv)
{
	double end = scenario_deadline(argc, argv);
	int fds[2];
	if (pipe(fds))
		return 1;
	struct pollfd p = {.fd = fds[0], .events = POLLIN};
	unsigned n = 0;
	while ((++n & 1023) || scenario_running(end))
		poll(&p, 1, 0);
	return 0;
}
