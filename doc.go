// Package ncclgo is NCCL's job — collective communication between GPUs —
// done in Go: communicators and the collective and point-to-point operations
// between their ranks, with NCCL's semantics in Go idiom.
//
//	comms, err := ncclgo.InitAll(ctx, []int{0, 0, 0, 0}, nil) // 4 ranks on GPU 0
//	...
//	g := ncclgo.NewGroup() // one process drives every rank: launch them together
//	for i, c := range comms {
//		err = g.AllReduce(c, send[i], recv[i], n, ncclgo.Float32, ncclgo.Sum, streams[i])
//	}
//	err = g.End()
//	for _, c := range comms {
//		err = c.Wait(ctx) // or synchronize the streams, then c.Err()
//	}
//	for _, c := range comms {
//		c.Destroy()
//	}
//
// Outside a group each call launches at once; ranks of one process that
// depend on each other must be launched together, through a Group as
// above (and as ExampleInitAll does), or from separate goroutines, one
// per rank, which may then call the Comm methods (c.AllReduce, ...)
// directly.
//
// The operations, as methods of Comm (launch now) and of Group (launch at
// the group's End), with NCCL's semantics: AllReduce, Broadcast, Reduce,
// AllGather, ReduceScatter, AllToAll, Gather, Scatter, Send and Recv; user
// reduction ops come from Comm.NewPreMulSum. Communicators come from
// InitAll (every rank in this process) or InitRank (one rank, joined through
// the UniqueID from GetUniqueID, passed around as text and read back with
// ParseUniqueID). Version reports the NCCL API level implemented.
//
// Operations are asynchronous on a caller-supplied CUDA stream of the
// communicator's device. Calls outside a group launch at once; calls made
// through a Group launch together at its outermost End (NCCL's
// ncclGroupStart/End, as a value instead of thread-local state). Several
// ranks may share one GPU, in one process: the number of channels (thread
// blocks per kernel) is bounded so that every co-located rank's blocks are
// resident at once, since they spin-wait on each other.
//
// Data types and reduction ops have nccl.h's values. Avg becomes a
// PreMulSum by 1/nRanks for floating-point types and a sum followed by a
// division for integers; Max and Min run the device's MinMax; PreMulSum ops
// come from Comm.NewPreMulSum.
//
// Device errors (an aborted kernel, a function without a device
// implementation) are stored by the kernels in host-mapped memory and
// returned by Comm.Err and Comm.Wait, like ncclCommGetAsyncError.
//
// The kernels come from a fatbin built by `ncclgen build` (see the README):
// Options.KernelImage, $NCCLGO_FATBIN, an image embedded with the
// ncclgo_embed build tag, or build/ncclgo.fatbin, in that order.
//
// Memory and streams are the caller's: device pointers are cuda.DevicePtr
// (a CUdeviceptr, so a pointer from cudart or another Go CUDA binding
// converts directly), streams are *cuda.Stream (cuda.WrapStream wraps an
// existing CUstream or cudaStream_t), and Options.Contexts runs a
// communicator in a caller's CUDA context instead of the device's primary
// context (cuda.WrapContext, cuda.CurrentContext).
//
// Ranks may be goroutines of one process or processes of one host: P2P
// (device memory, exported between processes as VMM file descriptors or
// CUDA IPC handles) or SHM (host shared memory) connect them, chosen per
// connection under NCCL_P2P_DISABLE, NCCL_P2P_LEVEL and NCCL_SHM_DISABLE.
// Ranks on different hosts (or processes given distinct NCCL_HOSTID values)
// connect through NET: TCP sockets (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY,
// NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD) driven by one proxy
// goroutine per process; LL128 is off on such communicators.
//
// The generator (gen/, cmd/ncclgen) emits the CUDA sources, tables and ABI
// under generated/; the machinery lives in runtime/ subpackages. See
// docs/ARCHITECTURE.md.
package ncclgo

//go:generate go run ./cmd/ncclgen generate -out generated
