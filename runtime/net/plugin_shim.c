// Calls into an NCCL net plugin through the table of its ABI version, so
// that the Go side sees one set of functions (plugin_abi.h).

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plugin_abi.h"
#include "_cgo_export.h"

void *ngnet_open(const char *path, char *err, size_t errLen) {
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL && errLen > 0) {
		const char *e = dlerror();
		snprintf(err, errLen, "%s", e ? e : "dlopen failed");
	}
	return lib;
}

int ngnet_find(void *lib, ngnet_plugin *p) {
	static const struct {
		const char *sym;
		int version;
	} syms[] = {{"ncclNetPlugin_v10", 10}, {"ncclNetPlugin_v9", 9}, {"ncclNetPlugin_v8", 8}};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *t = dlsym(lib, syms[i].sym);
		if (t != NULL) {
			p->version = syms[i].version;
			p->table = t;
			return 1;
		}
	}
	return 0;
}

// The logger every plugin gets: it formats the message and hands it to Go.
static void ngnet_log(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
	va_end(ap);
	ngnetGoLog(level, flags, (char *)(file ? file : ""), line, msg);
}

#define V8(p) ((ngnet_v8 *)(p)->table)
#define V9(p) ((ngnet_v9 *)(p)->table)
#define V10(p) ((ngnet_v10 *)(p)->table)

// Functions whose signature is the same in every version are called
// through v8's table: the tables share their layout up to irecvConsumed.
const char *ngnet_name(ngnet_plugin *p) { return V8(p)->name; }

int ngnet_init(ngnet_plugin *p) {
	if (p->version >= 10) {
		return V10(p)->init(ngnet_log, NULL);
	}
	return V8(p)->init(ngnet_log);
}

int ngnet_devices(ngnet_plugin *p, int *n) { return V8(p)->devices(n); }

int ngnet_properties(ngnet_plugin *p, int dev, ngnet_props *out) {
	memset(out, 0, sizeof *out);
	if (p->version >= 9) {
		ngnet_props_v9 q;
		memset(&q, 0, sizeof q);
		int rc = V9(p)->getProperties(dev, &q);
		*out = (ngnet_props){q.name, q.pciPath, q.guid, q.ptrSupport, q.regIsGlobal, q.speed, q.port, q.latency, q.maxComms, q.maxRecvs};
		return rc;
	}
	ngnet_props_v8 q;
	memset(&q, 0, sizeof q);
	int rc = V8(p)->getProperties(dev, &q);
	*out = (ngnet_props){q.name, q.pciPath, q.guid, q.ptrSupport, q.regIsGlobal, q.speed, q.port, q.latency, q.maxComms, q.maxRecvs};
	return rc;
}

int ngnet_listen(ngnet_plugin *p, int dev, void *handle, void **listenComm) {
	*listenComm = NULL;
	return V8(p)->listen(dev, handle, listenComm);
}

int ngnet_connect(ngnet_plugin *p, int dev, void *handle, void **sendComm) {
	ngnet_dev_handle *dh = NULL;
	*sendComm = NULL;
	if (p->version >= 10) {
		ngnet_comm_config cfg = {-1};
		return V10(p)->connect(dev, &cfg, handle, sendComm, &dh);
	}
	return V8(p)->connect(dev, handle, sendComm, &dh);
}

int ngnet_accept(ngnet_plugin *p, void *listenComm, void **recvComm) {
	ngnet_dev_handle *dh = NULL;
	*recvComm = NULL;
	return V8(p)->accept(listenComm, recvComm, &dh);
}

int ngnet_reg_mr(ngnet_plugin *p, void *comm, void *data, size_t size, int type, void **mh) {
	*mh = NULL;
	return V8(p)->regMr(comm, data, size, type, mh);
}

int ngnet_dereg_mr(ngnet_plugin *p, void *comm, void *mh) { return V8(p)->deregMr(comm, mh); }

int ngnet_isend(ngnet_plugin *p, void *comm, void *data, size_t size, int tag, void *mh, void **req) {
	*req = NULL;
	switch (p->version) {
	case 8:
		if (size > INT_MAX) {
			return ngnetInvalidArgument;
		}
		return V8(p)->isend(comm, data, (int)size, tag, mh, req);
	case 9:
		return V9(p)->isend(comm, data, size, tag, mh, req);
	}
	return V10(p)->isend(comm, data, size, tag, mh, NULL, req);
}

int ngnet_irecv(ngnet_plugin *p, void *comm, void *data, size_t size, int tag, void *mh, void **req) {
	*req = NULL;
	void *phandle = NULL;
	switch (p->version) {
	case 8: {
		if (size > INT_MAX) {
			return ngnetInvalidArgument;
		}
		int isize = (int)size;
		return V8(p)->irecv(comm, 1, &data, &isize, &tag, &mh, req);
	}
	case 9:
		return V9(p)->irecv(comm, 1, &data, &size, &tag, &mh, req);
	}
	return V10(p)->irecv(comm, 1, &data, &size, &tag, &mh, &phandle, req);
}

int ngnet_test(ngnet_plugin *p, void *req, int *done, int *size) {
	*done = 0;
	*size = 0;
	return V8(p)->test(req, done, size);
}

int ngnet_close_send(ngnet_plugin *p, void *comm) { return V8(p)->closeSend(comm); }
int ngnet_close_recv(ngnet_plugin *p, void *comm) { return V8(p)->closeRecv(comm); }
int ngnet_close_listen(ngnet_plugin *p, void *comm) { return V8(p)->closeListen(comm); }
