package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// DIRECT (kspace.Direct, devicesrc/direct.h) lets every rank load its
// peers' user buffers. It runs where every pair of ranks is on one GPU or
// on two GPUs with peer access (enabled by enablePeers), on one host, with
// NCCL_P2P_DISABLE unset when there are several GPUs (directReach):
//
//   - every rank in this process (directEligible, Topology.Direct): plain
//     device pointers work, every call may run DIRECT;
//   - ranks in several processes (MPS, IPC; directAcross): a rank's
//     pointers mean nothing in another process, so DIRECT runs on calls
//     whose buffers lie in registered windows (window.go), with the
//     window tuner (Engine.winTuner), and, on any buffers, as AllReduce's
//     LL one-shot (the communicator's tuner: llAcrossTopology), which
//     reads only the mailboxes; other calls run the other algorithms.
//
// Each rank allocates its mailboxes (one generated.DirectSlot per channel
// and the LL one-shot's line buffers, zeroed: see directSlotsBytes) in its
// own device memory (cuMemAlloc, which legacy IPC exports, under MPS too);
// the ranks exchange their addresses and, across processes, IPC handles
// over the bootstrap network (setupDirect), each rank maps its peers' and
// its device image lists them (DevComm.Direct), with the window table
// after them across processes. A rank writes only its own slots. Its slots
// are freed with its other device memory at Destroy, once its kernels are
// done; cuMemFree waits for the device's kernels, so a peer's kernel on the
// same GPU that still polls them finishes first, and a peer's IPC mapping
// keeps the memory until that peer closes it.

// directReach reports whether the ranks described by peers (the ranks'
// processes and devices) and l (their GPUs' peer access) can load each
// other's memory, processes aside.
func directReach(peers []transport.Peer, l topo.Layout, p2pDisable bool) bool {
	n := len(peers)
	if n < 2 || n > generated.DirectMaxRanks {
		return false
	}
	for r := 1; r < n; r++ {
		if peers[r].Host != peers[0].Host {
			return false
		}
	}
	if l.NGPUs > 1 {
		if p2pDisable {
			return false
		}
		for i := range l.NGPUs {
			for j := range l.NGPUs {
				if k := l.LinkBetween(i, j); k != topo.LinkSame && k != topo.LinkPeer {
					return false
				}
			}
		}
	}
	return true
}

// oneProcess reports whether every rank of peers is in one process.
func oneProcess(peers []transport.Peer) bool {
	for r := 1; r < len(peers); r++ {
		if !peers[r].SameProcess(peers[0]) {
			return false
		}
	}
	return true
}

// directEligible reports whether DIRECT can run on every call: the ranks
// reach each other's memory and all are in this process.
func directEligible(peers []transport.Peer, l topo.Layout, p2pDisable bool) bool {
	return oneProcess(peers) && directReach(peers, l, p2pDisable)
}

// directAcross reports whether DIRECT may run on windows across
// processes: the ranks reach each other's memory from several processes.
// Every rank asks it of the same peers; setupDirect ANDs the ranks' views
// of l.
func directAcross(peers []transport.Peer, l topo.Layout, p2pDisable bool) bool {
	return !oneProcess(peers) && directReach(peers, l, p2pDisable)
}

// directCandidate reports whether a communicator of peers is one where
// directAcross may hold: what every rank sees alike (the peers, not the
// layout), so that all of them run setupDirect's exchange or none does.
func directCandidate(peers []transport.Peer) bool {
	n := len(peers)
	if n < 2 || n > generated.DirectMaxRanks || oneProcess(peers) {
		return false
	}
	for r := 1; r < n; r++ {
		if peers[r].Host != peers[0].Host {
			return false
		}
	}
	return true
}

// ipcMemory is what DIRECT across processes asks of the driver: the
// communicator's context (*cuda.Context), or a fake in tests.
type ipcMemory interface {
	MemGetAddressRange(p cuda.DevicePtr) (base cuda.DevicePtr, size uint64, err error)
	IpcGetMemHandle(p cuda.DevicePtr) (cuda.IpcMemHandle, error)
	IpcOpenMemHandle(h cuda.IpcMemHandle) (cuda.DevicePtr, error)
	IpcCloseMemHandle(p cuda.DevicePtr) error
	MemcpyHtoD(dst cuda.DevicePtr, src unsafe.Pointer, n uint64) error
}

// directSlotsBytes is the size of one rank's mailboxes, zeroed at setup: a
// slot for every channel a kernel can serve, then per channel the LL
// one-shot's two buffers (by call parity) of generated.DirectLlBytes/8
// 16-byte lines each (directLLChannelBytes), where devicesrc/direct.h finds them.
// About 1 MiB per rank (64 × (128 B + 16 KiB)).
const directSlotsBytes = uint64(generated.MaxChannels) * (uint64(unsafe.Sizeof(generated.DirectSlot{})) + directLLChannelBytes)

// directLLChannelBytes is one channel's LL area: two buffers of
// generated.DirectLlBytes/8 lines of 16 bytes (8 data bytes and two flags).
const directLLChannelBytes = 2 * generated.DirectLlBytes / 8 * 16

// directRecordBytes is one rank's record in setupDirect's exchange: the
// mailboxes' address, whether the rank can run DIRECT across processes
// (its view of the layout, and an exported handle), and the handle.
const directRecordBytes = 8 + 1 + len(cuda.IpcMemHandle{})

// exchangeDirect publishes this rank's mailboxes at addr (with handle h
// when ok; across processes) and returns every rank's addresses and
// handles, by rank, and whether every rank said ok.
func exchangeDirect(ctx context.Context, net bootstrap.Network, addr uint64, ok bool, h cuda.IpcMemHandle) ([]uint64, []cuda.IpcMemHandle, bool, error) {
	rec := binary.LittleEndian.AppendUint64(nil, addr)
	if ok {
		rec = append(rec, 1)
	} else {
		rec = append(rec, 0)
	}
	rec = append(rec, h[:]...)
	all, err := net.AllGather(ctx, rec)
	if err != nil {
		return nil, nil, false, fmt.Errorf("exchanging the DIRECT mailboxes: %w", err)
	}
	table := make([]uint64, len(all))
	handles := make([]cuda.IpcMemHandle, len(all))
	allOK := true
	for r, b := range all {
		if len(b) != directRecordBytes {
			return nil, nil, false, fmt.Errorf("rank %d's DIRECT mailboxes: %d bytes, want %d", r, len(b), directRecordBytes)
		}
		table[r] = binary.LittleEndian.Uint64(b)
		if table[r] == 0 {
			return nil, nil, false, fmt.Errorf("rank %d's DIRECT mailboxes: null address", r)
		}
		allOK = allOK && b[8] == 1
		copy(handles[r][:], b[9:])
	}
	return table, handles, allOK, nil
}

// agreeAll gathers ok from every rank and returns nil when all said yes,
// else an error naming the first rank that did not (with its reason, why,
// when it is this rank), so that every rank stops alike.
func agreeAll(ctx context.Context, net bootstrap.Network, rank int, ok bool, why error, what string) error {
	b := []byte{0}
	if ok {
		b[0] = 1
	}
	all, err := net.AllGather(ctx, b)
	if err != nil {
		return fmt.Errorf("%s: agreeing: %w", what, err)
	}
	for r, v := range all {
		if len(v) != 1 || v[0] != 1 {
			if r == rank && why != nil {
				return fmt.Errorf("%s: %w", what, why)
			}
			return fmt.Errorf("%s: rank %d failed", what, r)
		}
	}
	return nil
}

// setupDirect allocates this rank's mailboxes, exchanges them and maps
// the peers' (across processes, through legacy IPC). inProcess is
// Topology.Direct (every rank has rank 0's answer); across is this rank's
// directAcross. It returns the mailboxes by rank (nil when DIRECT cannot
// run) and whether DIRECT runs across processes (on windows). Every rank
// reaches the same answers.
func (e *Engine) setupDirect(ctx context.Context, net bootstrap.Network, peers []transport.Peer, inProcess, across bool) ([]uint64, bool, error) {
	p, err := e.cctx.MemAlloc(directSlotsBytes)
	if err != nil {
		return nil, false, err
	}
	e.directMem = p
	if err := e.cctx.MemsetD8(p, 0, directSlotsBytes); err != nil {
		return nil, false, err
	}
	var h cuda.IpcMemHandle
	if !inProcess && across {
		if h, err = e.ipc.IpcGetMemHandle(p); err != nil {
			e.log.Info(fmt.Sprintf("DIRECT across processes off: exporting the mailboxes: %v", err), config.SubsysInit.Attr())
			across = false
		}
	}
	table, handles, allOK, err := exchangeDirect(ctx, net, uint64(p), inProcess || across, h)
	if err != nil {
		return nil, false, err
	}
	if inProcess {
		return table, false, nil
	}
	if !allOK {
		// Some rank cannot: no DIRECT; the mailboxes go.
		err := e.cctx.MemFree(p)
		e.directMem = 0
		return nil, false, err
	}
	var mapErr error
	for r := range table {
		if r == e.rank || peers[r].SameProcess(peers[e.rank]) {
			continue
		}
		q, err := e.ipc.IpcOpenMemHandle(handles[r])
		if err != nil {
			mapErr = fmt.Errorf("mapping rank %d's DIRECT mailboxes (%s): %w", r, peers[r], err)
			break
		}
		e.directPeers = append(e.directPeers, q)
		table[r] = uint64(q)
	}
	if err := agreeAll(ctx, net, e.rank, mapErr == nil, mapErr, "DIRECT mailboxes across processes"); err != nil {
		return nil, false, errors.Join(err, e.closeDirectPeers())
	}
	return table, true, nil
}

// llAcrossTopology is the communicator tuner's topology tp once
// setupDirect answered across: where it shared the mailboxes across
// processes, DIRECT may run AllReduce as the LL one-shot on any buffers
// (tune.Topology.DirectLLAcross), with no window on the work.
//
// Every rank must choose alike, or a rank on DIRECT polls mailboxes that a
// rank on the ring never fills. across is the same on every rank: it is
// true only when every rank said yes in exchangeDirect (the AND of their
// views) and every rank mapped every peer's mailboxes (agreeAll), and
// setupDirect fails on every rank otherwise; tp is rank 0's (agreeTuning).
// The tuner then decides from the call's collective, op, type and size,
// which every rank has alike, never from a rank's buffers.
//
// The device takes the LL one-shot on every rank for such a work before
// anything that needs the peers' buffers (ngAllReduceDirect tests the
// channel's share first; the tuner keeps every share within
// NG_DIRECT_LL_BYTES). Should a share exceed it anyway, ngDirectOpen
// publishes no window reference for a work without NG_WORK_DIRECT_WIN, and
// every rank stops with NG_DEV_ERR_BAD_WORK after its barriers: no peer
// pointer is dereferenced and nothing hangs.
func llAcrossTopology(tp tune.Topology, across bool) tune.Topology {
	tp.DirectLLAcross = across && !tp.Direct
	return tp
}

// closeDirectPeers unmaps the peers' mailboxes.
func (e *Engine) closeDirectPeers() error {
	var errs []error
	for _, q := range e.directPeers {
		errs = append(errs, e.ipc.IpcCloseMemHandle(q))
	}
	e.directPeers = nil
	return errors.Join(errs...)
}

// directFlags are the DevComm.DirectFlags of a layout, with windows
// when DIRECT runs across processes.
func directFlags(l topo.Layout, windows bool) uint32 {
	var f uint32
	if l.NGPUs == 1 {
		f |= generated.DirectSameGpu
	}
	if windows {
		f |= generated.DirectWindows
	}
	return f
}
