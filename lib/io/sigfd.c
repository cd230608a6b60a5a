#include <errno.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "sigfd.h"

int
sigfd_open(const int *sigs, size_t n, sigset_t *blocked)
{
	sigemptyset(blocked);
	for (size_t i = 0; i < n; i++) {
		signal(sigs[i], SIG_DFL);
		sigaddset(blocked, sigs[i]);
	}
	if (sigprocmask(SIG_BLOCK, blocked, NULL) < 0)
		return -1;
	return signalfd(-1, blocked, SFD_CLOEXEC | SFD_NONBLOCK);
}

int
sigfd_read(int fd)
{
	struct signalfd_siginfo si;
	ssize_t n;

	while ((n = read(fd, &si, sizeof(si))) < 0 && errno == EINTR)
		;
	return n == (ssize_t)sizeof(si) ? (int)si.ssi_signo : 0;
}
