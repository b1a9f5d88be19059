// A small NCCL net plugin over TCP, for the loader's tests: one device
// (loopback), sockets made non-blocking and progressed by test(), each
// message a 16-byte header (magic, tag, size) and its bytes.
//
// Build: cc -shared -fPIC -I.. -DNET_VERSION=10|9|8 sockplugin.c
// Variants for the failure tests: -DFAIL_INIT (init returns
// ncclSystemError), -DNO_EXPORT (exports only an unsupported version).
//
// Peculiarities on purpose, to test the loader: connect returns no comm on
// its first call and keeps that in the handle (as NCCL's plugins keep
// their connection state there), isend/irecv return no request when 32
// are outstanding, and registrations are checked against the buffers.

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "plugin_abi.h"

#ifndef NET_VERSION
#define NET_VERSION 10
#endif

#define MAGIC 0x7e57504cu
#define MAX_REQS 32
#define SUBSYS_NET 16

static ngnet_logger logfn;
#define LOG(level, ...)                                                  \
	do {                                                             \
		if (logfn) logfn(level, SUBSYS_NET, __FILE__, __LINE__, __VA_ARGS__); \
	} while (0)
#define WARN(...) LOG(ngnetLogWarn, __VA_ARGS__)

struct handle {
	uint32_t magic;
	uint32_t stage; // connect calls so far
	struct sockaddr_in addr;
};

struct listen_comm {
	int fd;
};

struct mr {
	uint32_t magic;
	char *base;
	size_t size;
};

struct msg_header {
	uint32_t magic;
	int32_t tag;
	uint64_t size;
};

struct comm;

struct req {
	struct comm *c;
	struct req *next;
	char *data;
	size_t posted;
	int tag;
	struct msg_header hdr;
	size_t hdrDone, dataDone;
	int done;
};

struct comm {
	int fd;
	int send;
	int failed; // the error code once the connection failed
	int nreqs;
	struct req *head; // in posting order
};

static int plugin_init(ngnet_logger log) {
	logfn = log;
#ifdef FAIL_INIT
	WARN("TestSock: init told to fail (built with FAIL_INIT)");
	return ngnetSystemError;
#else
	LOG(ngnetLogInfo, "TestSock: ABI v%d ready", NET_VERSION);
	return ngnetSuccess;
#endif
}

#if NET_VERSION >= 10
static int plugin_init10(ngnet_logger log, ngnet_profiler prof) {
	(void)prof;
	return plugin_init(log);
}
#endif

static int plugin_devices(int *n) {
	*n = 1;
	return ngnetSuccess;
}

#if NET_VERSION >= 9
typedef ngnet_props_v9 props_t;
#else
typedef ngnet_props_v8 props_t;
#endif

static int plugin_props(int dev, props_t *p) {
	if (dev != 0) {
		WARN("TestSock: no device %d", dev);
		return ngnetInvalidArgument;
	}
	memset(p, 0, sizeof *p);
	p->name = "lo";
	p->pciPath = NULL;
	p->guid = 0x7e57;
	p->ptrSupport = ngnetPtrHost;
	p->speed = 10000;
	p->latency = 1.5f;
	p->maxComms = 1024;
	p->maxRecvs = 1;
#if NET_VERSION >= 9
	p->maxP2pBytes = (size_t)1 << 31;
	p->maxCollBytes = (size_t)1 << 31;
#endif
	return ngnetSuccess;
}

static int nonblocking(int fd) {
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int plugin_listen(int dev, void *h, void **listenComm) {
	if (dev != 0) {
		return ngnetInvalidArgument;
	}
	struct handle *hd = h;
	memset(hd, 0, sizeof *hd);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) {
		WARN("TestSock: socket: %s", strerror(errno));
		return ngnetSystemError;
	}
	hd->addr.sin_family = AF_INET;
	hd->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof hd->addr;
	if (bind(fd, (struct sockaddr *)&hd->addr, len) != 0 || listen(fd, 16) != 0 ||
	    getsockname(fd, (struct sockaddr *)&hd->addr, &len) != 0) {
		WARN("TestSock: listen: %s", strerror(errno));
		close(fd);
		return ngnetSystemError;
	}
	hd->magic = MAGIC;
	struct listen_comm *l = calloc(1, sizeof *l);
	l->fd = fd;
	*listenComm = l;
	return ngnetSuccess;
}

static struct comm *new_comm(int fd, int send) {
	struct comm *c = calloc(1, sizeof *c);
	c->fd = fd;
	c->send = send;
	nonblocking(fd);
	return c;
}

static int plugin_connect8(int dev, void *h, void **sendComm, ngnet_dev_handle **dh) {
	(void)dh;
	struct handle *hd = h;
	*sendComm = NULL;
	if (dev != 0 || hd->magic != MAGIC) {
		WARN("TestSock: connect: device %d, handle magic %#x", dev, hd->magic);
		return ngnetInvalidArgument;
	}
	if (hd->stage++ == 0) {
		return ngnetSuccess; // "not yet": the next call continues
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&hd->addr, sizeof hd->addr) != 0) {
		WARN("TestSock: connect: %s", strerror(errno));
		if (fd >= 0) close(fd);
		return ngnetSystemError;
	}
	*sendComm = new_comm(fd, 1);
	return ngnetSuccess;
}

#if NET_VERSION >= 10
static int plugin_connect10(int dev, ngnet_comm_config *cfg, void *h, void **sendComm, ngnet_dev_handle **dh) {
	if (cfg == NULL || cfg->trafficClass != -1) {
		WARN("TestSock: connect: config %p", (void *)cfg);
		return ngnetInvalidArgument;
	}
	return plugin_connect8(dev, h, sendComm, dh);
}
#endif

static int plugin_accept(void *listenComm, void **recvComm, ngnet_dev_handle **dh) {
	(void)dh;
	struct listen_comm *l = listenComm;
	*recvComm = NULL;
	struct pollfd p = {l->fd, POLLIN, 0};
	if (poll(&p, 1, 0) <= 0) {
		return ngnetSuccess; // nothing yet
	}
	int fd = accept(l->fd, NULL, NULL);
	if (fd < 0) {
		WARN("TestSock: accept: %s", strerror(errno));
		return ngnetSystemError;
	}
	*recvComm = new_comm(fd, 0);
	return ngnetSuccess;
}

static int plugin_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
	(void)comm;
	if (type != ngnetPtrHost) {
		WARN("TestSock: regMr of memory type %d", type);
		return ngnetInvalidArgument;
	}
	struct mr *m = calloc(1, sizeof *m);
	m->magic = MAGIC;
	m->base = data;
	m->size = size;
	*mh = m;
	return ngnetSuccess;
}

static int plugin_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t off, int fd, void **mh) {
	(void)comm, (void)data, (void)size, (void)type, (void)off, (void)fd, (void)mh;
	return ngnetInternalError;
}

static int plugin_dereg_mr(void *comm, void *mh) {
	(void)comm;
	struct mr *m = mh;
	if (m == NULL || m->magic != MAGIC) {
		WARN("TestSock: deregMr of %p, not a registration", mh);
		return ngnetInvalidArgument;
	}
	m->magic = 0;
	free(m);
	return ngnetSuccess;
}

static int check_mr(void *mh, void *data, size_t size) {
	struct mr *m = mh;
	if (m == NULL) {
		return 1;
	}
	if (m->magic != MAGIC || (char *)data < m->base || (char *)data + size > m->base + m->size) {
		WARN("TestSock: buffer %p+%zu outside its registration", data, size);
		return 0;
	}
	return 1;
}

static int post(struct comm *c, void *data, size_t size, int tag, void *mh, void **request) {
	*request = NULL;
	if (c->failed) {
		return c->failed;
	}
	if (!check_mr(mh, data, size)) {
		return ngnetInvalidArgument;
	}
	if (c->nreqs == MAX_REQS) {
		return ngnetSuccess; // "not now"
	}
	struct req *r = calloc(1, sizeof *r);
	r->c = c;
	r->data = data;
	r->posted = size;
	r->tag = tag;
	r->hdr = (struct msg_header){MAGIC, tag, size};
	struct req **p = &c->head;
	while (*p) p = &(*p)->next;
	*p = r;
	c->nreqs++;
	*request = r;
	return ngnetSuccess;
}

static int do_isend(void *sendComm, void *data, size_t size, int tag, void *mh, void **request) {
	return post(sendComm, data, size, tag, mh, request);
}

static int do_irecv(void *recvComm, int n, void **data, size_t size, int *tags, void **mh, void **request) {
	*request = NULL;
	if (n != 1) {
		WARN("TestSock: irecv of %d buffers, maxRecvs is 1", n);
		return ngnetInvalidArgument;
	}
	return post(recvComm, data[0], size, tags[0], mh[0], request);
}

// io moves bytes [*done, n) of buf; 1 when complete, 0 when the socket
// would block, -1 when the connection failed.
static int io(struct comm *c, char *buf, size_t n, size_t *done) {
	while (*done < n) {
		ssize_t k = c->send ? send(c->fd, buf + *done, n - *done, MSG_NOSIGNAL) : recv(c->fd, buf + *done, n - *done, 0);
		if (k > 0) {
			*done += (size_t)k;
			continue;
		}
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			return 0;
		}
		WARN("TestSock: %s: %s", c->send ? "send" : "recv", k == 0 ? "the peer closed the connection" : strerror(errno));
		c->failed = ngnetRemoteError;
		return -1;
	}
	return 1;
}

static void progress(struct comm *c) {
	for (struct req *r = c->head; r && !c->failed; r = r->next) {
		if (r->done) {
			continue;
		}
		int k = io(c, (char *)&r->hdr, sizeof r->hdr, &r->hdrDone);
		if (k <= 0) {
			return;
		}
		if (!c->send && r->dataDone == 0) {
			if (r->hdr.magic != MAGIC) {
				WARN("TestSock: garbage on the connection (header magic %#x)", r->hdr.magic);
				c->failed = ngnetRemoteError;
				return;
			}
			if (r->hdr.tag != r->tag) {
				WARN("TestSock: a message with tag %d where the posted receive has tag %d", r->hdr.tag, r->tag);
				c->failed = ngnetRemoteError;
				return;
			}
			if (r->hdr.size > r->posted) {
				WARN("TestSock: a message of %llu bytes for a posted receive of %zu bytes", (unsigned long long)r->hdr.size,
				     r->posted);
				c->failed = ngnetRemoteError;
				return;
			}
		}
		k = io(c, r->data, r->hdr.size, &r->dataDone);
		if (k <= 0) {
			return;
		}
		r->done = 1;
	}
}

static int plugin_test(void *request, int *done, int *size) {
	struct req *r = request;
	struct comm *c = r->c;
	*done = 0;
	progress(c);
	if (!r->done) {
		return c->failed;
	}
	*done = 1;
	if (size) *size = (int)r->hdr.size;
	struct req **p = &c->head;
	while (*p != r) p = &(*p)->next;
	*p = r->next;
	c->nreqs--;
	free(r);
	return ngnetSuccess;
}

static int close_comm(void *comm) {
	struct comm *c = comm;
	for (struct req *r = c->head, *n; r; r = n) {
		n = r->next;
		free(r);
	}
	close(c->fd);
	free(c);
	return ngnetSuccess;
}

static int plugin_close_listen(void *listenComm) {
	struct listen_comm *l = listenComm;
	close(l->fd);
	free(l);
	return ngnetSuccess;
}

static int plugin_iflush(void *recvComm, int n, void **data, int *sizes, void **mh, void **request) {
	(void)recvComm, (void)n, (void)data, (void)sizes, (void)mh;
	*request = NULL;
	return ngnetSuccess;
}

#if NET_VERSION == 8
static int plugin_isend(void *c, void *data, int size, int tag, void *mh, void **req) {
	return do_isend(c, data, (size_t)size, tag, mh, req);
}
static int plugin_irecv(void *c, int n, void **data, int *sizes, int *tags, void **mh, void **req) {
	return do_irecv(c, n, data, (size_t)sizes[0], tags, mh, req);
}
#elif NET_VERSION == 9
static int plugin_isend(void *c, void *data, size_t size, int tag, void *mh, void **req) {
	return do_isend(c, data, size, tag, mh, req);
}
static int plugin_irecv(void *c, int n, void **data, size_t *sizes, int *tags, void **mh, void **req) {
	return do_irecv(c, n, data, sizes[0], tags, mh, req);
}
#else
static int plugin_isend(void *c, void *data, size_t size, int tag, void *mh, void *ph, void **req) {
	(void)ph;
	return do_isend(c, data, size, tag, mh, req);
}
static int plugin_irecv(void *c, int n, void **data, size_t *sizes, int *tags, void **mh, void **ph, void **req) {
	(void)ph;
	return do_irecv(c, n, data, sizes[0], tags, mh, req);
}
#endif

#define COMMON_TAIL                                                                             \
	.accept = plugin_accept, .regMr = plugin_reg_mr, .regMrDmaBuf = plugin_reg_mr_dmabuf,  \
	.deregMr = plugin_dereg_mr, .isend = plugin_isend, .irecv = plugin_irecv,              \
	.iflush = plugin_iflush, .test = plugin_test, .closeSend = close_comm,                 \
	.closeRecv = close_comm, .closeListen = plugin_close_listen

#if defined(NO_EXPORT)
// Only a version the loader does not support.
#define EXPORT(v) ncclNetPlugin_v7
#else
#define EXPORT(v) ncclNetPlugin_v##v
#endif

#if NET_VERSION == 10
const ngnet_v10 EXPORT(10) = {.name = "TestSock", .init = plugin_init10, .devices = plugin_devices,
			      .getProperties = plugin_props, .listen = plugin_listen,
			      .connect = plugin_connect10, COMMON_TAIL};
#elif NET_VERSION == 9
const ngnet_v9 EXPORT(9) = {.name = "TestSock", .init = plugin_init, .devices = plugin_devices,
			    .getProperties = plugin_props, .listen = plugin_listen,
			    .connect = plugin_connect8, COMMON_TAIL};
#else
const ngnet_v8 EXPORT(8) = {.name = "TestSock", .init = plugin_init, .devices = plugin_devices,
			    .getProperties = plugin_props, .listen = plugin_listen,
			    .connect = plugin_connect8, COMMON_TAIL};
#endif
