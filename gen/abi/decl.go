package abi

// Consts are the integer constants both sides share. Algorithm, protocol,
// collective and type numbers come from package kspace and are emitted
// beside these.
var Consts = []Const{
	{"NG_MAX_CHANNELS", 64, "most channels (thread blocks) one kernel serves"},
	{"NG_STEPS", 8, "slots of every connection FIFO; the credit window between sender and receiver"},
	{"NG_MAX_TREE_ARITY", 3, "most children of a node in a tree"},
	{"NG_MAX_NTHREADS", 640, "most threads of one block"},
	{"NG_WORK_INLINE_MAX", 61, "work descriptors that fit in the kernel arguments"},
	{"NG_WORK_REDOP_ARG_PTR", 1, "ngDevWork.flags: redOpArg is a device pointer to the scalar, not its bits"},
	{"NG_CONN_DIRECT", 1, "ngConnInfo.flags: the peer's user buffers are load/store accessible (same process, same or peer GPU)"},
	{"NG_CONN_SAME_GPU", 2, "ngConnInfo.flags: the peer runs on this very GPU"},
	{"NG_CONN_STEP_SIZES", 4, "ngConnInfo.flags: the sender stores a size word, a u32, for every step at ((uint32_t*)(tail + 1))[step % NG_STEPS]: SIMPLE the step's byte count, before it stores tail (NET: the proxy ships only those bytes); LL an NG_STEP_SIZE_LL word, before the step's first line"},
	{"NG_CONN_XPROC", 8, "ngConnInfo.flags: P2P between processes: head, tail and ptrExchange lie in the receiver's memory, which the sender maps; with NG_DIRECT_WINDOWS a SIMPLE SendRecv work on it may run by window (NG_WORK_P2P_SEND_WIN, devicesrc/sendrecv.h)"},
	{"NG_STEP_SIZE_LL", 0x80000000, "size word of an LL step (NG_CONN_STEP_SIZES): this bit | (step & 0x7FF) << 20 | the step's line count (< 2^20), stored and fenced (system scope) before any of the step's lines"},
	{"NG_ALLREDUCE_ONEHOP_BYTES", 65536, "ring AllReduce on exactly 2 ranks with LL: a channel's share of at most this many bytes goes in one hop (each rank sends its own input and reduces the peer's with it, in rank order) instead of the ring's two"},
	{"NG_DEV_ERR_UNSUPPORTED", 1, "ngDevComm.errorFlag: a kernel ran a function that has no device implementation"},
	{"NG_DEV_ERR_ABORTED", 2, "ngDevComm.errorFlag: a kernel stopped waiting because the abort flag was set"},
	{"NG_DIRECT_SAME_GPU", 1, "ngDevComm.directFlags: every rank of the communicator runs on this GPU (gpu-scope fences suffice for DIRECT)"},
	{"NG_DIRECT_WINDOWS", 2, "ngDevComm.directFlags: some ranks are in other processes: a DIRECT work runs only with NG_WORK_DIRECT_WIN, its slots carry window references (NG_DIRECT_WIN_SHIFT) that a reader resolves in the window table (ngDevComm.direct[nRanks + w*nRanks + r]: rank r's window w as mapped here)"},
	{"NG_DIRECT_MAX_WINDOWS", 64, "rows of the DIRECT window table: the windows of a communicator that DIRECT can read across processes (later ones run the other algorithms)"},
	{"NG_DIRECT_WIN_SHIFT", 48, "a DIRECT slot's sendbuff/recvbuff with bit 63 set is a window reference: the window index in bits NG_DIRECT_WIN_SHIFT-62, the byte offset in the window below"},
	{"NG_WORK_DIRECT_WIN", 2, "ngDevWork.flags: a DIRECT work whose sendbuff and recvbuff lie in registered windows: sendPeer and recvPeer are their window indices (rows of the window table)"},
	{"NG_WORK_P2P_SEND_WIN", 4, "ngDevWork.flags: a SendRecv work whose sendbuff lies in a registered window: root is its window index (row of the window table); on an NG_CONN_XPROC connection with NG_DIRECT_WINDOWS the sender publishes the window reference and the receiver copies from it"},
	{"NG_WORK_ONEHOP", 8, "ngDevWork.flags: a RING SIMPLE AllReduce work on exactly 2 ranks may run in one hop where its channel's share fits one FIFO slot: each rank sends its input, then reduces the peer's with its own (devicesrc/all_reduce.h); the ring's two steps otherwise"},
	{"NG_DIRECT_MAX_RANKS", 32, "most ranks DIRECT runs on (the kernel keeps every peer's buffer pointers in shared memory)"},
	{"NG_DIRECT_ONESHOT_BYTES", 8192, "DIRECT AllReduce: a channel's share of at most this many bytes runs one-shot (every rank reduces all of it), a larger one two-shot"},
	{"NG_DIRECT_LL_BYTES", 4096, "DIRECT AllReduce: a channel's share of at most this many bytes runs the LL one-shot (no barrier: every rank stores its share as LL lines in its own mailbox and polls its peers'). A rank's mailboxes are its NG_MAX_CHANNELS ngDirectSlots followed, per channel, by two LL buffers (by call parity) of NG_DIRECT_LL_BYTES/8 16-byte lines each, all zeroed at setup"},
	{"NG_LAUNCH_MAX_PARTS", 8, "most ranks one multi-rank launch serves (ngLaunchParts.comms)"},
	{"NG_KERNEL_PROGRAMMATIC", 1, "every kernel waits for the grids before it (PTX griddepcontrol.wait, sm_90 and later) once it has copied its communicator, channel and works, before it touches anything else: the host may launch it as a programmatic dependent launch"},
	{"NG_ARGS_TRIGGER_EARLY", 1, "ngKernelArgs.flags: once every block has waited for the grids before it (NG_KERNEL_PROGRAMMATIC), it lets the next programmatic launch on its stream start (PTX griddepcontrol.launch_dependents), so that kernel's launch and prologue overlap this one's work; at most two kernels of a stream are then resident at once, which the host counts in the blocks it budgets"},
	{"NG_ARGS_ONE_PASS", 2, "ngKernelArgs.flags: a multi-rank launch of every rank of one communicator, one AllReduce work per rank (works[q] is rank q's; every work of one count, function, redOpArg and flags) and one block per rank: block v reduces the v-th of nParts slices of every rank's sendbuff, in rank order, and stores the result into that slice of every rank's recvbuff; no block waits for another (devicesrc/all_reduce.h)"},
	{"NG_ARGS_ONE_PASS_ENTRY", 4, "ngKernelArgs.flags: with NG_ARGS_ONE_PASS, the works' function has the launched kernel's collective and type (an AllReduce function's kernel is its type's, whatever its op, algorithm and protocol), their reduction op (NG_REDOP_*) is in the bits from NG_ARGS_REDOP_SHIFT, and the kernel runs the call through its one-pass entry, straight from the arguments, instead of through the device function table (devicesrc/all_reduce.h)"},
	{"NG_ARGS_REDOP_SHIFT", 8, "ngKernelArgs.flags: with NG_ARGS_ONE_PASS_ENTRY, bits 8-11 hold the works' reduction op (NG_REDOP_*)"},
	{"NG_DEV_ERR_BAD_WORK", 3, "ngDevComm.errorFlag: a work descriptor was malformed (function id out of range, null table entry) or a Send and its Recv disagree on the size, or a DIRECT call across processes where some rank's buffers are in no window mapped here (the kernel then also sets the abort flag, so that the call's other parts stop waiting)"},
}

// ConnInfo is one direction of a connection between two ranks on one
// channel, as a kernel sees it. The receiver owns the FIFOs; the sender
// writes into them.
var ConnInfo = &Struct{
	Name: "ngConnInfo",
	Doc:  "one direction of a connection on one channel, as the device sees it",
	Fields: []Field{
		{Name: "buffs", Scalar: U64, Count: 3, Doc: "per protocol (LL, LL128, SIMPLE): the receiver's FIFO, NG_STEPS slots of buffSizes[p]/NG_STEPS bytes"},
		{Name: "head", Scalar: U64, Doc: "uint64_t*: steps the receiver has consumed (the sender waits on it for credit)"},
		{Name: "tail", Scalar: U64, Doc: "uint64_t*: steps the sender has posted (SIMPLE; LL and LL128 carry flags in the data)"},
		{Name: "step", Scalar: U64, Doc: "uint64_t*: this side's step counter, kept in device memory between kernels"},
		{Name: "ptrExchange", Scalar: U64, Doc: "uint64_t[8]*, in the receiver's memory: direct mode's exchange (NG_CONN_DIRECT), written by the receiver: [0] its user buffer, [1] the generation (its step + 1, written last), [2] the buffer's bytes, [3] the message's bytes (the whole Recv, all parts); then the sender, before it posts tail, writes its own message's bytes into [3] for the receiver. By window (NG_CONN_XPROC), written by the sender: [0] its sendbuff's window reference (NG_DIRECT_WIN_SHIFT), [1] the generation (its step + 1, written last), [2] the part's bytes, [3] the Send's bytes; then the receiver, before it returns the credit (head), writes [4]: its Recv's bytes, or a value that differs from the Send's when it copied nothing"},
		{Name: "buffSizes", Scalar: U32, Count: 3, Doc: "per protocol: bytes of the FIFO"},
		{Name: "flags", Scalar: U32, Doc: "NG_CONN_* bits"},
	},
	Size: 72,
}

// DevPeer holds both directions of the connection with one peer.
var DevPeer = &Struct{
	Name: "ngDevPeer",
	Doc:  "both directions of the connection with one peer on one channel",
	Fields: []Field{
		{Name: "send", Struct: ConnInfo, Doc: "to the peer"},
		{Name: "recv", Struct: ConnInfo, Doc: "from the peer"},
	},
	Size: 144,
}

// DevRing is a channel's ring.
var DevRing = &Struct{
	Name: "ngDevRing",
	Doc:  "a channel's ring",
	Fields: []Field{
		{Name: "prev", Scalar: I32, Doc: "rank we receive from"},
		{Name: "next", Scalar: I32, Doc: "rank we send to"},
		{Name: "index", Scalar: I32, Doc: "our position in the ring (0 for the ring's first rank)"},
		{Name: "pad", Scalar: I32},
		{Name: "userRanks", Scalar: U64, Doc: "int32_t*: userRanks[i] is the rank i steps downstream of us (userRanks[0] is us)"},
	},
	Size: 24,
}

// DevTree is a channel's tree.
var DevTree = &Struct{
	Name: "ngDevTree",
	Doc:  "a channel's tree (one of NCCL's double binary trees)",
	Fields: []Field{
		{Name: "up", Scalar: I32, Doc: "parent rank, -1 at the root"},
		{Name: "down", Scalar: I32, Count: 3, Doc: "child ranks, -1 where absent"},
		{Name: "depth", Scalar: I32, Doc: "depth of the tree"},
		{Name: "pad", Scalar: I32},
	},
	Size: 24,
}

// DevChannel is one channel as a kernel sees it.
var DevChannel = &Struct{
	Name: "ngDevChannel",
	Doc:  "one channel: its ring, its tree and its connections",
	Fields: []Field{
		{Name: "ring", Struct: DevRing},
		{Name: "tree", Struct: DevTree},
		{Name: "peers", Scalar: U64, Doc: "ngDevPeer*: one entry per rank (ring, tree and point-to-point share them)"},
		{Name: "id", Scalar: U32},
		{Name: "pad", Scalar: U32},
	},
	Size: 64,
}

// DevComm is the device side of a communicator.
var DevComm = &Struct{
	Name: "ngDevComm",
	Doc:  "the device side of a communicator (one rank)",
	Fields: []Field{
		{Name: "rank", Scalar: I32},
		{Name: "nRanks", Scalar: I32},
		{Name: "nChannels", Scalar: I32},
		{Name: "pad", Scalar: I32},
		{Name: "abortFlag", Scalar: U64, Doc: "volatile uint32_t* in host-mapped memory: non-zero asks every waiting thread to stop"},
		{Name: "errorFlag", Scalar: U64, Doc: "uint32_t* in host-mapped memory: the device stores an NG_DEV_ERR_* code here (first error wins)"},
		{Name: "channels", Scalar: U64, Doc: "ngDevChannel*: nChannels entries"},
		{Name: "buffSizes", Scalar: U32, Count: 3, Doc: "per protocol: bytes of each FIFO"},
		{Name: "directFlags", Scalar: U32, Doc: "NG_DIRECT_* bits"},
		{Name: "direct", Scalar: U64, Doc: "uint64_t*: nRanks entries, rank r's ngDirectSlot array (one slot per channel), in this rank's address space; with NG_DIRECT_WINDOWS the window table follows (NG_DIRECT_MAX_WINDOWS rows of nRanks window bases, 0 where no window); 0 when DIRECT cannot run (DIRECT reports NG_DEV_ERR_UNSUPPORTED)"},
	},
	Size: 64,
}

// DirectSlot is one rank's mailbox on one channel for the DIRECT
// algorithms: the rank writes it, its peers poll it.
var DirectSlot = &Struct{
	Name: "ngDirectSlot",
	Doc: "one rank's DIRECT mailbox on one channel, written by that rank only and read by its peers: the user " +
		"buffers of the call in progress and the barrier counter (one more per barrier the rank arrived at; zero at setup)",
	Fields: []Field{
		{Name: "sendbuff", Scalar: U64, Doc: "the call's sendbuff: a pointer, or with NG_DIRECT_WINDOWS a window reference (NG_DIRECT_WIN_SHIFT)"},
		{Name: "recvbuff", Scalar: U64, Doc: "the call's recvbuff, as sendbuff"},
		{Name: "phase", Scalar: U64},
		{Name: "llSeq", Scalar: U64, Doc: "LL one-shots this rank finished on the channel (zero at setup; read and stored by the rank itself only): call s uses LL buffer s&1 and flag s%0xFFFFFFFF+1"},
		{Name: "pad", Scalar: U64, Count: 12, Doc: "to 128 bytes: slots of different channels share no cache line"},
	},
	Size: 128,
}

// DevWork describes one operation on one channel.
var DevWork = &Struct{
	Name: "ngDevWork",
	Doc: "one operation's share on one channel. Collectives: count is the elements of one rank's " +
		"chunk for AllGather/ReduceScatter and of the whole buffer otherwise; the channel handles elements " +
		"[chanOffset, chanOffset+chanCount) of it. Byte-moving collectives (Broadcast, AllGather, AllGatherV) " +
		"count bytes, not elements. AllGatherV: count is the number of parts each rank's block is split into " +
		"and chanOffset the part this channel moves. SendRecv: sendbuff/recvbuff are this channel's parts, " +
		"count is the bytes to send to sendPeer, chanCount the bytes to receive from recvPeer (-1: none), " +
		"chanOffset the whole send message's bytes and redOpArg the whole receive message's bytes (every part " +
		"carries them; the two sides compare them).",
	Fields: []Field{
		{Name: "sendbuff", Scalar: U64},
		{Name: "recvbuff", Scalar: U64},
		{Name: "count", Scalar: U64},
		{Name: "chanOffset", Scalar: U64},
		{Name: "chanCount", Scalar: U64},
		{Name: "redOpArg", Scalar: U64, Doc: "PreMulSum: the scalar's bits (or, with NG_WORK_REDOP_ARG_PTR, a device pointer to it); SumPostDiv: the divisor in bits 0-62; MinMax: bit 0 is 1 for min, 0 for max; for both, bit 63 asks for signed arithmetic (signed types share the unsigned functions); AllGatherV: uint64_t* counts[nRanks] then displacements[nRanks], in bytes"},
		{Name: "funcId", Scalar: U16, Doc: "index in the device function table"},
		{Name: "flags", Scalar: U8, Doc: "NG_WORK_* bits"},
		{Name: "nWarps", Scalar: U8, Doc: "warps to use, 0 for all"},
		{Name: "root", Scalar: I32, Doc: "Broadcast, Reduce: the root rank; SendRecv with NG_WORK_P2P_SEND_WIN: sendbuff's window index"},
		{Name: "sendPeer", Scalar: I32, Doc: "SendRecv: the peer; a DIRECT work with NG_WORK_DIRECT_WIN: sendbuff's window index; else -1"},
		{Name: "recvPeer", Scalar: I32, Doc: "SendRecv: the peer; a DIRECT work with NG_WORK_DIRECT_WIN: recvbuff's window index; else -1"},
	},
	Size: 64,
}

// LaunchParts is the table of a multi-rank launch: one kernel launch that
// runs the blocks of several ranks of this process on one GPU.
var LaunchParts = &Struct{
	Name: "ngLaunchParts",
	Doc: "the table of a multi-rank launch (ngKernelArgs.nParts > 0), in the kernel arguments right after the " +
		"launch's inline works (at works[nWork]): slot v (the v-th set bit of channelMask) serves channel " +
		"chans[v] & 63 of the rank whose ngDevComm is comms[chans[v] >> 6]",
	Fields: []Field{
		{Name: "comms", Scalar: U64, Count: 8, Doc: "ngDevComm* of each rank of the launch (NG_LAUNCH_MAX_PARTS)"},
		{Name: "chans", Scalar: U16, Count: 64, Doc: "per slot: part << 6 | channel"},
	},
	Size: 192,
}

// KernelArgs is what every kernel receives by value.
var KernelArgs = &Struct{
	Name: "ngKernelArgs",
	Doc: "every kernel's argument, passed by value. Block b serves slot v, the b-th set bit of channelMask; " +
		"slot v runs works [chanWorkStart[v], chanWorkStart[v+1]) in order, read from workBuf when it is not 0 " +
		"and from works otherwise. With nParts 0 the launch is one rank's: slot v is that rank's channel v and " +
		"comm its ngDevComm. With nParts > 0 it is a multi-rank launch of nParts ranks: its works are inline, " +
		"an ngLaunchParts follows them (at works[nWork]) and maps each slot to a rank and a channel, and comm " +
		"is unused.",
	Fields: []Field{
		{Name: "comm", Scalar: U64, Doc: "ngDevComm* (nParts 0)"},
		{Name: "channelMask", Scalar: U64},
		{Name: "workBuf", Scalar: U64, Doc: "ngDevWork* in device-visible memory, or 0 when the works are inline"},
		{Name: "nWork", Scalar: U32},
		{Name: "nParts", Scalar: U32, Doc: "0: one rank's launch; n > 0: a multi-rank launch of n ranks (see ngLaunchParts)"},
		{Name: "chanWorkStart", Scalar: U16, Count: 65},
		{Name: "flags", Scalar: U16, Doc: "NG_ARGS_* bits"},
		{Name: "pad2", Scalar: U16, Count: 14},
		{Name: "works", Struct: DevWork, Count: 61},
	},
	Size: 4096,
}

// Structs lists every declared struct in dependency order.
var Structs = []*Struct{ConnInfo, DevPeer, DevRing, DevTree, DevChannel, DevComm, DirectSlot, DevWork, LaunchParts, KernelArgs}
