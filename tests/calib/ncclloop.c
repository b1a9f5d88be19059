// ncclloop: nccl-tests' timing loop in plain C, with NCCL and the CUDA
// runtime loaded by dlopen as ncclperf loads NCCL, for issue 17's
// calibration: when ncclloop agrees with nccl-tests and ncclperf's NCCL
// column does not, the difference is in ncclperf's process (Go); when
// ncclloop agrees with ncclperf, it is in loading NCCL with dlopen.
//
// One process, one thread, -g ranks (GPUs 0..g-1, or all on GPU 0 with
// -s), ncclCommInitAll, buffers from ncclMemAlloc, non-blocking streams.
// Per size (-b to -e by 2): -w out-of-place warm-up iterations at every
// size first, then one untimed iteration and a drain, then a host clock
// around -n iterations issued back to back (one group over the ranks when
// there are several, buffers shifted per iteration as nccl-tests does)
// and the drain. Draining polls cudaStreamQuery on every stream, checks
// ncclCommGetAsyncError of the busy ones and calls sched_yield after a
// pass that finds none finished; a drain longer than -t seconds (60) is an
// error naming the busy ranks. It prints nccl-tests' first columns
// (size, count, type, redop, root, time) and then the issue loop's own
// time per iteration (host).
//
//	cc -O2 -o ncclloop ncclloop.c -ldl
//	ncclloop -l libnccl.so.2 -r libcudart.so -c allreduce -b 8 -e 4M -g 2 -n 200 -w 20
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void* comm_t;
typedef void* stream_t;
enum { ncclFloat32 = 7, ncclSum = 0, cudaStreamNonBlocking = 1, cudaErrorNotReady = 600 };

static int (*commInitAll)(comm_t*, int, const int*);
static int (*commDestroy)(comm_t);
static int (*commGetAsyncError)(comm_t, int*);
static int (*memAlloc)(void**, size_t);
static int (*groupStart)(void);
static int (*groupEnd)(void);
static int (*allReduce)(const void*, void*, size_t, int, int, comm_t, stream_t);
static int (*allGather)(const void*, void*, size_t, int, comm_t, stream_t);
static int (*reduceScatter)(const void*, void*, size_t, int, int, comm_t, stream_t);
static int (*broadcast)(const void*, void*, size_t, int, int, comm_t, stream_t);
static const char* (*errorString)(int);
static int (*setDevice)(int);
static int (*streamCreate)(stream_t*, unsigned);
static int (*streamQuery)(stream_t);

static void* sym(void* lib, const char* name) {
	void* p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "ncclloop: %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static void nccl(int r, const char* what) {
	if (r) {
		fprintf(stderr, "ncclloop: %s: NCCL error %d (%s)\n", what, r, errorString(r));
		exit(1);
	}
}

static void cuda(int r, const char* what) {
	if (r) {
		fprintf(stderr, "ncclloop: %s: CUDA error %d\n", what, r);
		exit(1);
	}
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { AR, AG, RS, BC };
static int coll, g;
static comm_t comms[16];
static stream_t streams[16];
static char *sendb[16], *recvb[16];
static size_t maxBytes;

// countOf is nccl-tests' per-rank element count for a size in bytes (the
// size of AllGather and ReduceScatter is the whole buffer, each rank's
// chunk rounded down to 16 bytes).
static size_t countOf(size_t bytes) {
	if (coll == AG || coll == RS) return (bytes / g) / 16 * 16 / 4;
	return bytes / 4;
}

// run issues one iteration: every rank's call, in one group when g > 1.
static void run(size_t count, int iter) {
	size_t per = count * 4 * ((coll == AG || coll == RS) ? g : 1);
	size_t steps = per ? maxBytes / per : 1;
	size_t shift = per * (iter % (steps ? steps : 1));
	if (g > 1) nccl(groupStart(), "ncclGroupStart");
	for (int i = 0; i < g; i++) {
		char *s = sendb[i] + shift, *d = recvb[i] + shift;
		switch (coll) {
		case AR: nccl(allReduce(s, d, count, ncclFloat32, ncclSum, comms[i], streams[i]), "ncclAllReduce"); break;
		case AG: nccl(allGather(s, d, count, ncclFloat32, comms[i], streams[i]), "ncclAllGather"); break;
		case RS: nccl(reduceScatter(s, d, count, ncclFloat32, ncclSum, comms[i], streams[i]), "ncclReduceScatter"); break;
		case BC: nccl(broadcast(s, d, count, ncclFloat32, 0, comms[i], streams[i]), "ncclBroadcast"); break;
		}
	}
	if (g > 1) nccl(groupEnd(), "ncclGroupEnd");
}

// drainLimit bounds one drain (-t seconds): a stream that never finishes
// (a peer or the GPU gone wrong) ends the run with an error naming it.
static double drainLimit = 60;

static void drain(void) {
	int done[16] = {0}, left = g;
	double start = now();
	while (left > 0) {
		if (now() - start > drainLimit) {
			for (int i = 0; i < g; i++)
				if (!done[i]) fprintf(stderr, "ncclloop: rank %d's stream still busy after %.0f s (-t)\n", i, drainLimit);
			exit(1);
		}
		int idle = 1;
		for (int i = 0; i < g; i++) {
			if (done[i]) continue;
			int r = streamQuery(streams[i]);
			if (r == 0) {
				done[i] = 1, left--, idle = 0;
				continue;
			}
			if (r != cudaErrorNotReady) cuda(r, "cudaStreamQuery");
			int async = 0;
			nccl(commGetAsyncError(comms[i], &async), "ncclCommGetAsyncError");
			nccl(async, "asynchronous error");
		}
		if (idle) sched_yield();
	}
}

static size_t bytesArg(const char* s) {
	char* end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'K': case 'k': v *= 1 << 10; break;
	case 'M': case 'm': v *= 1 << 20; break;
	case 'G': case 'g': v *= 1 << 30; break;
	}
	return (size_t)v;
}

int main(int argc, char** argv) {
	const char *libPath = "libnccl.so.2", *rtPath = "libcudart.so", *collName = "allreduce";
	size_t minB = 8;
	int iters = 20, warm = 1, shared = 0, opt;
	maxBytes = 32 << 20;
	g = 1;
	while ((opt = getopt(argc, argv, "l:r:c:b:e:g:n:w:st:")) != -1) {
		switch (opt) {
		case 'l': libPath = optarg; break;
		case 'r': rtPath = optarg; break;
		case 'c': collName = optarg; break;
		case 'b': minB = bytesArg(optarg); break;
		case 'e': maxBytes = bytesArg(optarg); break;
		case 'g': g = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'w': warm = atoi(optarg); break;
		case 's': shared = 1; break;
		case 't': drainLimit = strtod(optarg, NULL); break;
		default:
			fprintf(stderr, "usage: ncclloop [-l libnccl] [-r libcudart] [-c allreduce|allgather|reducescatter|broadcast] [-b min] [-e max] [-g ranks] [-n iters] [-w warmup] [-s] [-t drain-limit-s]\n");
			return 2;
		}
	}
	if (g < 1 || g > 16 || iters < 1 || warm < 0 || minB < 1 || maxBytes < minB || !(drainLimit > 0)) {
		fprintf(stderr, "ncclloop: -g %d (1..16), -n %d (>= 1), -w %d (>= 0), -b %zu, -e %zu (1 <= b <= e), -t %g (> 0 s)\n", g, iters, warm, minB, maxBytes, drainLimit);
		return 2;
	}
	const char* names[] = {"allreduce", "allgather", "reducescatter", "broadcast"};
	coll = -1;
	for (int i = 0; i < 4; i++)
		if (!strcmp(collName, names[i])) coll = i;
	if (coll < 0) {
		fprintf(stderr, "ncclloop: -c %s: want allreduce, allgather, reducescatter or broadcast\n", collName);
		return 2;
	}
	void* rt = dlopen(rtPath, RTLD_NOW | RTLD_GLOBAL);
	if (!rt) {
		fprintf(stderr, "ncclloop: %s\n", dlerror());
		return 2;
	}
	void* lib = dlopen(libPath, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "ncclloop: %s\n", dlerror());
		return 2;
	}
	setDevice = sym(rt, "cudaSetDevice");
	streamCreate = sym(rt, "cudaStreamCreateWithFlags");
	streamQuery = sym(rt, "cudaStreamQuery");
	commInitAll = sym(lib, "ncclCommInitAll");
	commDestroy = sym(lib, "ncclCommDestroy");
	commGetAsyncError = sym(lib, "ncclCommGetAsyncError");
	memAlloc = sym(lib, "ncclMemAlloc");
	groupStart = sym(lib, "ncclGroupStart");
	groupEnd = sym(lib, "ncclGroupEnd");
	allReduce = sym(lib, "ncclAllReduce");
	allGather = sym(lib, "ncclAllGather");
	reduceScatter = sym(lib, "ncclReduceScatter");
	broadcast = sym(lib, "ncclBroadcast");
	errorString = sym(lib, "ncclGetErrorString");

	int devs[16];
	for (int i = 0; i < g; i++) devs[i] = shared ? 0 : i;
	nccl(commInitAll(comms, g, devs), "ncclCommInitAll");
	for (int i = 0; i < g; i++) {
		cuda(setDevice(devs[i]), "cudaSetDevice");
		cuda(streamCreate(&streams[i], cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
		nccl(memAlloc((void**)&sendb[i], maxBytes), "ncclMemAlloc");
		nccl(memAlloc((void**)&recvb[i], maxBytes), "ncclMemAlloc");
	}
	cuda(setDevice(devs[0]), "cudaSetDevice");
	for (size_t b = minB; b <= maxBytes; b *= 2) {
		size_t count = countOf(b);
		if (!count) continue;
		for (int i = 0; i < warm; i++) run(count, i);
		drain();
	}
	printf("# ncclloop %s, %d ranks%s, -n %d -w %d, %s (dlopen)\n", names[coll], g, shared ? " on GPU 0" : "", iters, warm, libPath);
	printf("#%11s %12s %8s %6s %6s %10s %10s\n", "size(B)", "count", "type", "redop", "root", "time(us)", "host(us)");
	for (size_t b = minB; b <= maxBytes; b *= 2) {
		size_t count = countOf(b);
		if (!count) continue;
		run(count, 0);
		drain();
		double t0 = now();
		for (int i = 0; i < iters; i++) run(count, i);
		double host = now() - t0;
		drain();
		double all = now() - t0;
		size_t size = (coll == AG || coll == RS) ? count * 4 * g : count * 4;
		printf("%12zu %12zu %8s %6s %6d %10.2f %10.2f\n", size, count, "float", coll == AG || coll == BC ? "none" : "sum", coll == BC ? 0 : -1,
		       all * 1e6 / iters, host * 1e6 / iters);
	}
	for (int i = 0; i < g; i++) commDestroy(comms[i]);
	return 0;
}
