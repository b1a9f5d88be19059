// Command capi is ncclgo as a drop-in libnccl.so.2: NCCL's C API (the
// nccl.h that gen emits, NCCL 2.28.7's ABI) over the public Go API of
// package ncclgo. Build it with `make libnccl`, which runs
//
//	go build -buildmode=c-shared -ldflags="-extldflags '-Wl,-soname,libnccl.so.2 \
//		-Wl,-z,nodelete -Wl,--version-script=capi/libnccl.map'" ./capi
//
// and lays build/ out as NCCL_HOME: build/include/nccl.h and
// build/lib/libnccl.so.2 (with a libnccl.so link). The version script
// exports NCCL's API (nccl* and the profiling aliases pnccl*) and nothing
// else: the Go runtime's and cgo's own symbols stay local. NVML (NVLink
// topology) is loaded with dlopen at the first multi-GPU init, so the
// library needs none of its symbols to load or link, and a host without
// it only leaves NVLink counts unknown.
//
// # Semantics
//
// Group calls (ncclGroupStart/ncclGroupEnd) nest per OS thread, as NCCL's
// do: a cgo callback runs on the calling C thread, so the thread keys the
// group (by a number of the library's own, as the kernel reuses thread
// ids: a group a thread leaves open when it ends is never another's).
// Collectives in a group join one ncclgo.Group, launched at the
// outermost ncclGroupEnd; communicator inits in a group (the way
// nccl-tests and multi-GPU hosts create their ranks from one thread) run
// concurrently at that ncclGroupEnd. A communicator whose ncclConfig_t has
// blocking = 0 initializes in the background: init returns ncclInProgress
// and ncclCommGetAsyncError reports ncclInProgress until it is done.
// ncclCommFinalize is ncclgo's Comm.Finalize: later calls with the
// communicator are refused (ncclInvalidUsage); a blocking communicator
// waits for its work there, a nonblocking one returns ncclInProgress and
// finalizes in the background, reported by ncclCommGetAsyncError.
// ncclCommAbort from another thread ends an init (or split, or shrink)
// still running: the init returns ncclInternalError, as NCCL's does, and
// ncclGetLastError says the abort ended it. It stops the communicator's
// kernels and frees it, as NCCL's does, so a later ncclCommDestroy of it
// is ncclInvalidArgument. A thread polling ncclCommGetAsyncError
// meanwhile (torch's watchdog) is never blocked by it and sees an error:
// the abort's (ncclRemoteError, or ncclInternalError for an init it
// ended) until the communicator is freed, then ncclInvalidArgument. An
// ncclCommAbort while another thread's ncclCommDestroy (or ncclCommAbort)
// of the communicator runs aborts what that call waits for (an init, or
// kernels waiting on a peer), so that it ends, and returns ncclSuccess.
// ncclCommGetAsyncError's message names the rank and, for a failed init,
// the call that made it.
//
// An ncclConfig_t is read as NCCL 2.28 reads it: its first size bytes
// over NCCL_CONFIG_INITIALIZER's defaults, the fields newer than its
// version at their defaults, and every field checked against the values
// NCCL accepts (what NCCL refuses is ncclInvalidArgument naming the
// field). blocking, minCTAs and maxCTAs take effect (minCTAs and maxCTAs
// capped at 64, as in NCCL); what each other field does in ncclgo, mostly
// nothing since ncclgo has no network plugins, CollNet, NVLS or
// thread-block clusters, is listed in configFields (config.go).
//
// ncclMemAlloc allocates as NCCL does: on the calling thread's device, a
// VMM allocation (cuMemCreate) exportable as a POSIX file descriptor, and
// also as a fabric handle where the device supports them (the allocation
// is made again without when the system refuses them: no IMEX), GPUDirect
// RDMA capable where the driver allows it, its size rounded up to the
// recommended granularity, mapped at an address aligned to it, and
// readable and writable by the device and every device with peer access to
// it; cuMemAlloc where the device has no VMM or NCCL_CUMEM_ENABLE=0.
// ncclMemFree unmaps and releases exactly that; a pointer ncclMemAlloc did
// not return (one inside an allocation, one freed already) is
// ncclInvalidArgument naming it.
//
// Registration is optional for correctness in NCCL. ncclCommRegister
// changes nothing in ncclgo: its ring and tree kernels never read a user
// buffer from another GPU or process (they copy through the
// communicator's own buffers, set up at init). ncclCommRegister and
// ncclCommWindowRegister check the buffer: on a communicator
// whose init succeeded, buff..buff+size must be memory CUDA knows (it may
// span adjacent allocations, as an allocator's expandable segment does),
// and device memory must be the communicator's device's
// (ncclInvalidArgument naming buff or size otherwise). Page-locked host
// memory is not registered: ncclCommRegister gives a NULL handle, as NCCL
// does, and ncclCommDeregister takes NULL. Each call gives a new handle;
// one deregisters once, on its own communicator and with its own call
// (ncclCommDeregister for handles, ncclCommWindowDeregister for windows):
// a second deregister, another communicator's handle or a pointer that is
// no handle is ncclInvalidUsage (NCCL's code for a handle it does not
// find) saying which. ncclCommDestroy and ncclCommAbort forget the
// communicator's handles. Windows take NCCL_WIN_DEFAULT or
// NCCL_WIN_COLL_SYMMETRIC (alike) and never host memory, and are
// collective (ncclgo.Comm.RegisterWindow): every rank registers, in the
// same order, the same size, and deregisters alike. Where ranks of
// several processes share a GPU (MPS) or NVLink, each maps its peers'
// windows and DIRECT runs on calls whose buffers lie in windows on every
// rank (nccl-tests' -R 2): cudaMalloc'd buffers travel as legacy IPC
// handles, VMM ones (ncclMemAlloc's, PyTorch's expandable segments) as
// POSIX file descriptors; a window that neither exports (VMM memory
// without POSIX fd handles, a window across two VMM mappings) or that a
// peer cannot map runs the ring, and its INFO line says why.
//
// ncclCommInitRank uses the device of the calling thread's current CUDA
// context (cudart's current device; device 0 when none is current). Every
// entry point restores the thread's current context before it returns.
// Streams are the caller's CUstreams (cudaStream_t); NULL and
// cudaStreamLegacy are the legacy default stream, cudaStreamPerThread the
// calling thread's default stream, all accepted as NCCL accepts them.
// Ranks of one process that share a GPU launch what they are handed on a
// default stream on a stream of their own, joined to the caller's by
// events (ncclgo's enqueue.Lane), so that they do not queue behind each
// other; one thread driving several such ranks must group their calls, as
// NCCL requires of one thread driving several GPUs. Buffers are device
// addresses. Within a group, the calls of one communicator must use one
// stream.
//
// Errors never abort the host: every entry point returns an ncclResult_t,
// and ncclGetLastError says what failed, naming the argument, its value and
// what is valid. Handles are never reused: a call with a destroyed
// communicator is ncclInvalidArgument, also after others were made. A panic inside the library (a bug) is caught where it
// entered, or in the init goroutine it happened in, and returns
// ncclInternalError naming the panic and its place. What ncclgo does not implement yet (the device
// API, ncclGroupSimulateEnd, ncclCommRevoke, ncclCommInitRankScalable with
// several ids) returns ncclInvalidUsage and says so.
//
// ncclCommSplit and ncclCommShrink (default and NCCL_SHRINK_ABORT) run
// like an init: at once, or at ncclGroupEnd within a group, and in the
// background for a nonblocking config (a NULL config inherits the
// parent's). A rank with NCCL_SPLIT_NOCOLOR gets NULL and still takes part.
// The new communicator's bootstrap travels over the parent's; it shares
// nothing else with the parent (splitShare and shrinkShare are hints
// ncclgo does not honour); see ncclgo's Comm.Split and Comm.Shrink.
//
// # The Go runtime inside a C or Python host
//
// A c-shared Go library installs signal handlers only for the synchronous
// signals (SIGSEGV, SIGBUS, SIGFPE), SIGPIPE and SIGURG (goroutine
// preemption); it saves the host's handlers and forwards to them the
// signals that do not come from Go code. For the other signals it keeps
// the host's handlers and only turns on their SA_ONSTACK flag. Hosts that
// install handlers for those signals after loading the library must use
// SA_ONSTACK (Python's faulthandler does). The library never calls
// os/signal. A host that wants no SIGURG sent to threads while they run
// the library's code can set GODEBUG=asyncpreemptoff=1 in its environment.
// Its goroutines belong to communicators (ended by ncclCommDestroy or
// ncclCommAbort) and to bootstrap roots (ended once their ranks have
// checked in). The library is linked with -z nodelete: a Go runtime cannot
// be unloaded, so dlclose leaves it in place.
//
// # Kernels
//
// The kernel image is found as package kernels finds it ($NCCLGO_FATBIN,
// then the image embedded with -tags ncclgo_embed), and then beside the
// library: ncclgo.fatbin in the directory that holds libnccl.so.2.
package main

func main() {}
