// The ABI of NCCL's net plugins (ncclNet_v8, v9 and v10 of NCCL's
// ext-net/ headers), declared here from their documented layouts: the
// loader (plugin_shim.c) and the test plugin (testdata/sockplugin.c) both
// include it. Only declarations: plugin.go's cgo preamble includes it
// next to an //export.

#ifndef NGNET_PLUGIN_ABI_H
#define NGNET_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

// Result codes (ncclResult_t).
enum {
	ngnetSuccess = 0,
	ngnetUnhandledCudaError = 1,
	ngnetSystemError = 2,
	ngnetInternalError = 3,
	ngnetInvalidArgument = 4,
	ngnetInvalidUsage = 5,
	ngnetRemoteError = 6,
	ngnetInProgress = 7,
};

// Log levels (ncclDebugLogLevel) and pointer kinds (NCCL_PTR_*).
enum { ngnetLogNone, ngnetLogVersion, ngnetLogWarn, ngnetLogInfo, ngnetLogAbort, ngnetLogTrace };
enum { ngnetPtrHost = 1, ngnetPtrCuda = 2, ngnetPtrDmabuf = 4 };

#define NGNET_HANDLE_SIZE 128
#define NGNET_MAX_VDEVS 4

// The logger a plugin gets at init (ncclDebugLogger_t): level, subsystem
// bits, source file and line, printf format.
typedef void (*ngnet_logger)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);
// The profiler callback of v10 (ncclProfilerCallback_t); we pass NULL.
typedef int (*ngnet_profiler)(void **event, int type, void *phandle, int64_t pluginID, void *extra);

// A device-offload handle (ncclNetDeviceHandle_v7..v10_t). We never ask
// for offload: connect/accept get a pointer to a NULL one.
typedef struct {
	int type;
	int version;
	void *handle;
	size_t size;
	int needsProxyProgress;
} ngnet_dev_handle;

typedef struct {
	char *name;
	char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int speed; // Mbit/s
	int port;
	float latency; // µs
	int maxComms;
	int maxRecvs;
	int netDeviceType;
	int netDeviceVersion;
} ngnet_props_v8;

typedef struct {
	int ndevs;
	int devs[NGNET_MAX_VDEVS];
} ngnet_vprops;

// v9's and v10's properties (the same layout).
typedef struct {
	char *name;
	char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int forceFlush;
	int speed;
	int port;
	float latency;
	int maxComms;
	int maxRecvs;
	int netDeviceType;
	int netDeviceVersion;
	ngnet_vprops vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
} ngnet_props_v9;

// v10's per-connection configuration (ncclNetCommConfig_v10_t).
typedef struct {
	int trafficClass; // -1: undefined
} ngnet_comm_config;

typedef struct {
	const char *name;
	int (*init)(ngnet_logger log);
	int (*devices)(int *ndev);
	int (*getProperties)(int dev, ngnet_props_v8 *props);
	int (*listen)(int dev, void *handle, void **listenComm);
	int (*connect)(int dev, void *handle, void **sendComm, ngnet_dev_handle **sendDevComm);
	int (*accept)(void *listenComm, void **recvComm, ngnet_dev_handle **recvDevComm);
	int (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	int (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
	int (*deregMr)(void *comm, void *mhandle);
	int (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
	int (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles, void **request);
	int (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
	int (*test)(void *request, int *done, int *sizes);
	int (*closeSend)(void *sendComm);
	int (*closeRecv)(void *recvComm);
	int (*closeListen)(void *listenComm);
	int (*getDeviceMr)(void *comm, void *mhandle, void **dptrMhandle);
	int (*irecvConsumed)(void *recvComm, int n, void *request);
} ngnet_v8;

typedef struct {
	const char *name;
	int (*init)(ngnet_logger log);
	int (*devices)(int *ndev);
	int (*getProperties)(int dev, ngnet_props_v9 *props);
	int (*listen)(int dev, void *handle, void **listenComm);
	int (*connect)(int dev, void *handle, void **sendComm, ngnet_dev_handle **sendDevComm);
	int (*accept)(void *listenComm, void **recvComm, ngnet_dev_handle **recvDevComm);
	int (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	int (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
	int (*deregMr)(void *comm, void *mhandle);
	int (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void **request);
	int (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **request);
	int (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
	int (*test)(void *request, int *done, int *sizes);
	int (*closeSend)(void *sendComm);
	int (*closeRecv)(void *recvComm);
	int (*closeListen)(void *listenComm);
	int (*getDeviceMr)(void *comm, void *mhandle, void **dptrMhandle);
	int (*irecvConsumed)(void *recvComm, int n, void *request);
	int (*makeVDevice)(int *dev, ngnet_vprops *props);
} ngnet_v9;

typedef struct {
	const char *name;
	int (*init)(ngnet_logger log, ngnet_profiler prof);
	int (*devices)(int *ndev);
	int (*getProperties)(int dev, ngnet_props_v9 *props);
	int (*listen)(int dev, void *handle, void **listenComm);
	int (*connect)(int dev, ngnet_comm_config *config, void *handle, void **sendComm, ngnet_dev_handle **sendDevComm);
	int (*accept)(void *listenComm, void **recvComm, ngnet_dev_handle **recvDevComm);
	int (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	int (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
	int (*deregMr)(void *comm, void *mhandle);
	int (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle, void **request);
	int (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **phandles, void **request);
	int (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
	int (*test)(void *request, int *done, int *sizes);
	int (*closeSend)(void *sendComm);
	int (*closeRecv)(void *recvComm);
	int (*closeListen)(void *listenComm);
	int (*getDeviceMr)(void *comm, void *mhandle, void **dptrMhandle);
	int (*irecvConsumed)(void *recvComm, int n, void *request);
	int (*makeVDevice)(int *dev, ngnet_vprops *props);
} ngnet_v10;

// The loader's side (plugin_shim.c): one loaded plugin, whichever version.
typedef struct {
	int version; // 10, 9 or 8
	void *table; // the ngnet_v<version> the library exports
} ngnet_plugin;

// Properties in the loader's version-independent form.
typedef struct {
	const char *name;
	const char *pciPath;
	uint64_t guid;
	int ptrSupport;
	int regIsGlobal;
	int speed;
	int port;
	float latency;
	int maxComms;
	int maxRecvs;
} ngnet_props;

// ngnet_open dlopens path; NULL and the dlerror text in err (errLen bytes)
// when it cannot.
void *ngnet_open(const char *path, char *err, size_t errLen);
// ngnet_find looks the versioned symbols up, newest first, and fills p;
// it returns 0 when none is there.
int ngnet_find(void *lib, ngnet_plugin *p);
const char *ngnet_name(ngnet_plugin *p);
int ngnet_init(ngnet_plugin *p);
int ngnet_devices(ngnet_plugin *p, int *n);
int ngnet_properties(ngnet_plugin *p, int dev, ngnet_props *out);
int ngnet_listen(ngnet_plugin *p, int dev, void *handle, void **listenComm);
int ngnet_connect(ngnet_plugin *p, int dev, void *handle, void **sendComm);
int ngnet_accept(ngnet_plugin *p, void *listenComm, void **recvComm);
int ngnet_reg_mr(ngnet_plugin *p, void *comm, void *data, size_t size, int type, void **mh);
int ngnet_dereg_mr(ngnet_plugin *p, void *comm, void *mh);
int ngnet_isend(ngnet_plugin *p, void *comm, void *data, size_t size, int tag, void *mh, void **req);
int ngnet_irecv(ngnet_plugin *p, void *comm, void *data, size_t size, int tag, void *mh, void **req);
int ngnet_test(ngnet_plugin *p, void *req, int *done, int *size);
int ngnet_close_send(ngnet_plugin *p, void *comm);
int ngnet_close_recv(ngnet_plugin *p, void *comm);
int ngnet_close_listen(ngnet_plugin *p, void *comm);

#endif
