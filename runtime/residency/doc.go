// Package residency keeps the blocks of every communicator that share a GPU
// co-resident, so that communicators running at the same time on one GPU
// never deadlock.
//
// # Why
//
// A kernel of a communicator spins on its peers: a block of rank 0 waits
// for data from the block of rank 1 on the same channel. When ranks share a
// GPU, every one of those blocks must be resident at once, or a resident
// block spins against one the hardware will never schedule. The tuner
// (runtime/tune) sizes one communicator for that: channels × co-located
// ranks ≤ SMs × resident blocks per SM. Two communicators on one GPU each
// sized that way can, together, ask for twice what fits: each holds some
// SMs with blocks that wait for blocks stuck behind the other's, and both
// wait forever.
//
// # The ledger
//
// A Ledger holds, per GPU, a budget of co-resident blocks (SMs × blocks per
// SM of the widest kernel, Budget) and what is in use. Each communicator
// holds a Lease on the ledger of its process, shared by all its ranks in
// the process (Join). A lease is either idle or held; a held lease
// reserves, on every GPU where the communicator has ranks in this process,
//
//	width × local ranks on that GPU
//
// blocks, width being the most blocks per rank of the launches it covers.
// The unit of admission is one launch of one communicator (a collective or
// a group of them) on every GPU of the process at once: the reservation is
// taken atomically for all the GPUs, so two communicators that share two
// GPUs cannot each hold one and wait for the other.
//
// Every rank counts its launches (its sequence number). A held lease
// covers the sequence numbers below its grantedEnd: a rank whose launch is
// covered passes at once, without queueing, because its peers may already
// be spinning on it. A launch that is not covered asks for a grant, which
// sets grantedEnd past it; the grant waits until the lease's (possibly
// larger) reservation fits beside the other held leases and no earlier
// waiter shares one of its GPUs (first come, first served per GPU, so
// neither a busy communicator nor a wide one starves the others). A rank
// running ahead of its peers therefore waits behind a waiting communicator,
// while the ranks lagging behind it still pass: the lease drains and is
// released, and the waiter gets its turn.
//
// # Why one reservation per communicator suffices
//
// Launches of one rank run one after another: those on one stream by CUDA's
// stream order, those on different streams because the launch path makes
// a rank's new stream wait for the rank's previous launch (as NCCL's
// strong stream does). So at any moment each local rank runs at most one
// kernel of at most width blocks, and the communicator has at most
// width × local ranks blocks on a GPU, however many launches are queued;
// a plan's several launches go to one stream and are ordered the same way.
// The lease stays held while any launch it covered may still run: each
// admitted launch pins it until the launch path registers the launch's
// Completion (a CUDA event recorded after it, Ticket.Done), and the lease
// is released once every rank's latest completion reports done. Releases
// are lazy: a waiter that cannot be admitted queries the outstanding
// completions (no goroutine of the ledger runs in the background), and it
// polls, with backoff, until it is admitted or its context ends.
//
// Width must be the same on every rank at one sequence number, or a
// lagging rank could need more than the grant it passes under: collectives
// split the same way on every rank, so their plans have the same blocks;
// plans with point-to-point work ask for the communicator's channel count.
// A covered launch that still asks for more grows the reservation without
// waiting, which can overcommit the GPU but never blocks a rank its peers
// spin on.
//
// # What it cannot order
//
// The ledger never holds back a launch its peers wait for, so it never
// turns a correct program into a deadlock. It cannot fix a program whose
// own order needs two communicators resident at once on a GPU that has
// room for only one: goroutine X issuing communicator A then C while
// goroutine Y issues C then A, each before the other's peers launch. Such
// a wait ends with an error at the communicator's timeout (NCCL leaves the
// same order to the user: operations of communicators that share a device
// must be issued in one global order). Ranks of a communicator must also
// group their calls alike (the k-th launch of every rank carries the same
// collectives), which NCCL requires too.
//
// # Several processes on one GPU (MPS)
//
// The ledger is per process. Processes share a GPU concurrently only under
// MPS, and there each process sees the whole GPU. Two ways to extend the
// guarantee across processes:
//
//   - MPS's execution-resource limit: start every client with
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE so that the percentages of the
//     clients sharing a GPU add up to at most 100. MPS then confines each
//     client to its share of the SMs, the clients' blocks never compete,
//     and each process's ledger is exact for its share: the communicator
//     takes the SM count from the driver, which under MPS reports the
//     client's share (topo.SMShareOf), and sizes both the ledger's budget
//     and its channels from it, counting only its own process's ranks
//     when every process on the GPU has a share and the shares add up to
//     at most 100 (runtime/comm's smshare.go). A limit set only in the
//     control daemon (set_active_thread_percentage) shrinks the count the
//     driver reports, but without the variable the processes count as
//     competing: give the clients the variable too. The budget arithmetic is tested on the CPU; the
//     tests package's TestStressMPS runs it under MPS on the GPU machine
//     (2 and 4 processes of 8 ranks each, 64 MiB AllReduces at once).
//   - A ledger shared by the processes: the same state (budget, use, FIFO
//     of waiters, per-lease completions) in a shared-memory segment keyed
//     by the GPU's UUID, under a process-shared lock, with completions as
//     interprocess CUDA events. Not built: it needs a robust lock that
//     survives a client's death and IPC events, and MPS's limit gives the
//     same guarantee with no shared state.
package residency
