/*
 * cforward: the bench's raw epoll forwarder (test/bench/tcpproxy,
 * epollraw_linux.go) written in C, one system call for one system call:
 * one thread, edge-triggered sockets registered once, a read and a write
 * per relayed chunk, buffers from a free list. It answers one question of
 * issue 23: whether the pinned throughput Switchyard's event loop lacks
 * against nginx stream and HAProxy is the relay's (then this program lacks
 * it too) or a Go process's (then only the Go forwarder does).
 *
 * A bench tool, never product code. Usage, as the bench starts it:
 *   cforward -role cforward -target IP:PORT [-buf BYTES]
 * It listens on 127.0.0.1 on a free port, prints the address on stdout,
 * and exits when its standard input closes.
 *
 * Build: cc -O2 -o cforward forward.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct end {
	int fd;
	struct end *peer;
	char *buf;
	size_t off, n;
	int connecting, eof;
};

static int ep, lfd;
static struct sockaddr_in to;
static size_t bufsize = 16 << 10;
static struct end **ends;
static size_t nends;
static char **freebufs;
static size_t nfree, capfree;

static void die(const char *what) {
	perror(what);
	exit(1);
}

static char *buffer(void) {
	if (nfree > 0)
		return freebufs[--nfree];
	char *b = malloc(bufsize);
	if (!b)
		die("malloc");
	return b;
}

static void release(char *b) {
	if (nfree == capfree) {
		capfree = capfree ? 2 * capfree : 64;
		freebufs = realloc(freebufs, capfree * sizeof *freebufs);
		if (!freebufs)
			die("realloc");
	}
	freebufs[nfree++] = b;
}

static void track(struct end *e) {
	if ((size_t)e->fd >= nends) {
		size_t n = nends ? nends : 64;
		while (n <= (size_t)e->fd)
			n *= 2;
		ends = realloc(ends, n * sizeof *ends);
		if (!ends)
			die("realloc");
		memset(ends + nends, 0, (n - nends) * sizeof *ends);
		nends = n;
	}
	ends[e->fd] = e;
}

static void add(int fd) {
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.fd = fd};
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static void nodelay(int fd) {
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void close_pair(struct end *e) {
	struct end *pair[2] = {e, e->peer};
	for (int i = 0; i < 2; i++) {
		struct end *x = pair[i];
		if ((size_t)x->fd < nends && ends[x->fd] == x) {
			ends[x->fd] = NULL;
			close(x->fd);
			release(x->buf);
		}
	}
	free(pair[0]);
	free(pair[1]);
}

static void accept_all(void) {
	for (;;) {
		int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0)
			return;
		int ufd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (ufd < 0) {
			close(cfd);
			continue;
		}
		nodelay(cfd);
		nodelay(ufd);
		struct end *c = calloc(1, sizeof *c), *u = calloc(1, sizeof *u);
		if (!c || !u)
			die("calloc");
		c->fd = cfd;
		c->buf = buffer();
		u->fd = ufd;
		u->buf = buffer();
		c->peer = u;
		u->peer = c;
		track(c);
		track(u);
		if (connect(ufd, (struct sockaddr *)&to, sizeof to) < 0) {
			if (errno != EINPROGRESS) {
				close_pair(c);
				continue;
			}
			u->connecting = 1;
		}
		add(cfd);
		add(ufd);
	}
}

/* relay moves e's bytes to its peer until e or the peer would block or e
 * ends; 0 when the pair was closed. */
static int relay(struct end *e) {
	for (;;) {
		while (e->off < e->n) {
			ssize_t n = write(e->peer->fd, e->buf + e->off, e->n - e->off);
			if (n < 0) {
				if (errno == EAGAIN)
					return 1;
				close_pair(e);
				return 0;
			}
			e->off += n;
		}
		if (e->eof)
			return 1;
		ssize_t n = read(e->fd, e->buf, bufsize);
		if (n < 0) {
			if (errno == EAGAIN)
				return 1;
			close_pair(e);
			return 0;
		}
		if (n == 0) {
			e->eof = 1;
			shutdown(e->peer->fd, SHUT_WR);
			if (e->peer->eof) {
				close_pair(e);
				return 0;
			}
			return 1;
		}
		e->off = 0;
		e->n = n;
	}
}

static void ready(struct end *e, unsigned events) {
	if (e->connecting) {
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		int err = 0;
		socklen_t len = sizeof err;
		if (getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
			close_pair(e);
			return;
		}
		e->connecting = 0;
	}
	if (e->peer->connecting)
		return;
	struct end *peer = e->peer;
	if (relay(e))
		relay(peer);
}

int main(int argc, char **argv) {
	const char *target = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-target") == 0)
			target = argv[i + 1];
		else if (strcmp(argv[i], "-buf") == 0)
			bufsize = strtoul(argv[i + 1], NULL, 10);
	}
	if (!target || bufsize == 0) {
		fprintf(stderr, "usage: cforward -target IP:PORT [-buf BYTES]\n");
		return 2;
	}
	char host[64];
	const char *colon = strrchr(target, ':');
	if (!colon || (size_t)(colon - target) >= sizeof host) {
		fprintf(stderr, "cforward: bad target %s\n", target);
		return 2;
	}
	memcpy(host, target, colon - target);
	host[colon - target] = 0;
	to.sin_family = AF_INET;
	to.sin_port = htons(atoi(colon + 1));
	if (inet_pton(AF_INET, host, &to.sin_addr) != 1) {
		fprintf(stderr, "cforward: bad target %s\n", target);
		return 2;
	}

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("socket");
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 4096) < 0)
		die("listen");
	socklen_t alen = sizeof la;
	getsockname(lfd, (struct sockaddr *)&la, &alen);
	printf("127.0.0.1:%d\n", ntohs(la.sin_port));
	fflush(stdout);

	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event lev = {.events = EPOLLIN, .data.fd = lfd};
	struct epoll_event sev = {.events = EPOLLIN, .data.fd = 0};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev) < 0)
		die("epoll_ctl");

	struct epoll_event events[128];
	for (;;) {
		int n = epoll_wait(ep, events, 128, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			if (fd == 0)
				return 0; /* stdin closed: the bench is done */
			if (fd == lfd) {
				accept_all();
				continue;
			}
			if ((size_t)fd < nends && ends[fd])
				ready(ends[fd], events[i].events);
		}
	}
}
