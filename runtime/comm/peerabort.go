package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// EnvPeerAbort turns off ("0") the ending of a dead peer's kernels ("1",
// the default): a rank of a communicator that spans processes keeps its
// host flags in shared memory, the ranks of the other processes of the
// machine map them, and when a process dies without destroying the
// communicator the survivors set its ranks' abort flags, so that its
// kernels, which outlive it under MPS, stop waiting on them
// (docs/notes/20261201-hosts-matrix-faults.md).
const EnvPeerAbort = "NCCLGO_PEER_ABORT"

// peerAbortFromEnv reads EnvPeerAbort through lookup: on unless it is "0".
func peerAbortFromEnv(lookup func(string) (string, bool)) (bool, error) {
	return envChoice(lookup, EnvPeerAbort, true, map[string]bool{"0": false, "1": true},
		"0 (leave a dead peer's kernels alone) or 1 (end them, the default)")
}

// flagPageKey and pidfdKey are the keys under which a rank's server hands
// out its flag page and a pidfd of its process.
const (
	flagPageKey = 1
	pidfdKey    = 2
)

// flagPageBytes is the size of a shared flag page: the hostFlags at its
// start, the rest unused.
func flagPageBytes() int { return max(os.Getpagesize(), hostFlagsBytes) }

// newSharedFlags makes rank's host flags a zeroed page of shared memory
// (a memfd) page-locked and mapped for the device (cuMemHostRegister with
// DEVICEMAP|PORTABLE), so that the ranks of other processes of the machine
// can map it and set its abort flag. freeSharedFlags undoes it.
func newSharedFlags(m *cuda.Context, rank int) (*ipc.Segment, error) {
	seg, err := ipc.CreateSegment(fmt.Sprintf("ncclgo-flags-r%d", rank), flagPageBytes())
	if err != nil {
		return nil, err
	}
	if err := m.MemHostRegister(seg.Ptr(), uint64(seg.Size())); err != nil {
		return nil, errors.Join(err, seg.Close())
	}
	return seg, nil
}

// freeSharedFlags unregisters and unmaps a page of newSharedFlags and
// closes its descriptor, in that order.
func freeSharedFlags(m *cuda.Context, seg *ipc.Segment) error {
	return errors.Join(m.MemHostUnregister(seg.Ptr()), seg.Close())
}

// peerPages are the flag pages of the ranks that run in other processes of
// this machine (topo.ThisMachine, whatever NCCL_HOSTID says), mapped here
// (host memory only: no CUDA call), and watches of those processes. When
// one dies (its pidfd says so, or the liveness watcher, or the proxy's
// lost connection leads here) its ranks' abort flags are set, once.
type peerPages struct {
	rank  int
	log   *slog.Logger
	procs []*peerProc

	mu     sync.Mutex // orders stores into the pages against Close
	closed bool
}

// peerProc is one peer process: its ranks' pages and the watch of its end
// (nil where its kernel has no pidfds).
type peerProc struct {
	peer  transport.Peer
	ranks []int
	pages []*ipc.Segment
	watch *ipc.ExitWatch
	ended atomic.Bool
}

// peerFlagsRecord is what a rank publishes: its machine and the address
// of its descriptor server ("" when it shares nothing), and whether the
// server also holds a pidfd of its process.
func peerFlagsRecord(machine, addr string, pidfd bool) []byte {
	p := "0"
	if pidfd {
		p = "1"
	}
	return []byte(strings.Join([]string{"flags1", machine, addr, p}, "\x00"))
}

func parsePeerFlagsRecord(b []byte) (machine, addr string, pidfd bool, err error) {
	f := strings.Split(string(b), "\x00")
	if len(f) != 4 || f[0] != "flags1" || (f[3] != "0" && f[3] != "1") {
		return "", "", false, fmt.Errorf("a flag-page record of %d bytes that is not \"flags1\\0MACHINE\\0ADDR\\0{0,1}\"", len(b))
	}
	return f[1], f[2], f[3] == "1", nil
}

// sharePeerFlags exchanges flag pages among the ranks of peers: every rank
// calls it (it is collective) once some rank runs in another process.
// own is this rank's page (nil: it shares none, as with EnvPeerAbort=0),
// machine is topo.ThisMachine, and pidfd gives a pidfd of this process
// (ipc.SelfPidfd). It maps the pages of the ranks of the other processes
// of its machine that share theirs (when own is nil, none) and watches
// those processes. A peer it cannot reach (another network namespace) is
// logged and left out. It returns nil when it mapped nothing.
func sharePeerFlags(ctx context.Context, net bootstrap.Network, rank int, peers []transport.Peer, machine string,
	own *ipc.Segment, pidfd func() (int, error), log *slog.Logger) (_ *peerPages, err error) {
	var srv *ipc.Server
	hasPidfd := false
	if own != nil {
		if srv, err = ipc.Listen(ipc.NewName("ncclgo-flags")); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, srv.Close()) }()
		fd, err := own.Dup()
		if err != nil {
			return nil, err
		}
		if err := srv.Add(flagPageKey, fd); err != nil {
			return nil, err
		}
		if fd, err := pidfd(); err == nil {
			if err := srv.Add(pidfdKey, fd); err != nil {
				return nil, err
			}
			hasPidfd = true
		} else {
			log.Info(fmt.Sprintf("no pidfd of this process (%v): the ranks of other processes end its kernels only once their liveness watcher reports it", err), config.SubsysInit.Attr())
		}
	}
	addr := ""
	if srv != nil {
		addr = srv.Addr()
	}
	recs, err := net.AllGather(ctx, peerFlagsRecord(machine, addr, hasPidfd))
	if err != nil {
		return nil, fmt.Errorf("exchanging flag pages: %w", err)
	}
	pp := &peerPages{rank: rank, log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, pp.Close())
		}
	}()
	if own != nil {
		for p, rec := range recs {
			if p == rank || peers[p].SameProcess(peers[rank]) {
				continue
			}
			m, a, withPidfd, err := parsePeerFlagsRecord(rec)
			if err != nil {
				return nil, fmt.Errorf("rank %d (%s) sent %w", p, peers[p], err)
			}
			if m != machine || a == "" {
				continue
			}
			if err := pp.add(ctx, p, peers[p], a, withPidfd); err != nil {
				return nil, err
			}
		}
	}
	// No server closes before every rank has fetched from it.
	if err := net.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("exchanging flag pages: %w", err)
	}
	if len(pp.procs) == 0 {
		return nil, nil
	}
	return pp, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}

// add maps the flag page of rank p (of process peer) that the server at
// addr serves, with a watch of its process when the server holds a pidfd
// of it (fetched once per process). A server it cannot reach is logged and
// left out.
func (pp *peerPages) add(ctx context.Context, p int, peer transport.Peer, addr string, withPidfd bool) error {
	key := transport.Peer{PID: peer.PID, Host: peer.Host}
	var proc *peerProc
	for _, q := range pp.procs {
		if q.peer.SameProcess(key) {
			proc = q
		}
	}
	keys := []uint64{flagPageKey}
	if proc == nil && withPidfd {
		keys = append(keys, pidfdKey)
	}
	fds, err := ipc.Fetch(ctx, addr, keys...)
	if err != nil {
		pp.log.Info(fmt.Sprintf("rank %d (%s) is on this machine but its flag page cannot be fetched (%v): its kernels cannot be ended from here", p, peer, err), config.SubsysInit.Attr())
		return nil
	}
	page, err := ipc.MapSegment(fds[0], flagPageBytes())
	if err != nil {
		closeFDs(fds[1:])
		return fmt.Errorf("mapping rank %d's flag page: %w", p, err)
	}
	pp.mu.Lock() // the watch of an earlier rank of proc may be ending it
	if proc == nil {
		proc = &peerProc{peer: peer}
		pp.procs = append(pp.procs, proc)
	}
	proc.ranks = append(proc.ranks, p)
	proc.pages = append(proc.pages, page)
	pp.mu.Unlock()
	if len(fds) == 2 {
		w, err := ipc.WatchExit(fds[1], func() { pp.end(proc, "its process ended") })
		if err != nil {
			return fmt.Errorf("watching rank %d's process: %w", p, err)
		}
		proc.watch = w
	}
	return nil
}

// end sets the abort flag of every rank of proc, once, and logs it.
func (pp *peerPages) end(proc *peerProc, why string) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed || !proc.ended.CompareAndSwap(false, true) {
		return
	}
	var ended []int
	for i, page := range proc.pages {
		f := (*hostFlags)(page.Ptr())
		if f.freed.Load() != 0 {
			continue // destroyed: its kernels are done
		}
		f.abort.Store(1)
		ended = append(ended, proc.ranks[i])
	}
	if len(ended) > 0 {
		pp.log.Info(fmt.Sprintf("ended the kernels of rank(s) %s (%s): %s without destroying the communicator", joinInts(ended), proc.peer.Process(), why), config.SubsysInit.Attr())
	}
}

// endRank ends the kernels of the process that runs rank (which the
// liveness watcher reported lost). It does nothing on a nil pp.
func (pp *peerPages) endRank(rank int) {
	if pp == nil {
		return
	}
	for _, proc := range pp.procs {
		for _, r := range proc.ranks {
			if r == rank {
				pp.end(proc, "its process exited")
				return
			}
		}
	}
}

// endExited ends the kernels of every peer process that has ended (its
// pidfd says so now). It does nothing on a nil pp.
func (pp *peerPages) endExited() {
	if pp == nil {
		return
	}
	for _, proc := range pp.procs {
		if proc.watch != nil && !proc.ended.Load() && proc.watch.Exited() {
			pp.end(proc, "its process ended")
		}
	}
}

// Close stops the watches (waiting for their goroutines), unmaps every
// peer page and closes every descriptor. It may be called more than once
// and on a nil pp.
func (pp *peerPages) Close() error {
	if pp == nil {
		return nil
	}
	pp.mu.Lock()
	if pp.closed {
		pp.mu.Unlock()
		return nil
	}
	pp.closed = true
	pp.mu.Unlock()
	var errs []error
	for _, proc := range pp.procs {
		errs = append(errs, proc.watch.Close())
		for _, page := range proc.pages {
			errs = append(errs, page.Close())
		}
	}
	return errors.Join(errs...)
}

// allocFlags allocates c's host flags and, when some rank runs in another
// process, shares them with the ranks of the other processes of this
// machine (unless EnvPeerAbort is "0") and maps theirs. It is collective
// then: every rank calls it at the same point of setup.
func (c *Engine) allocFlags(ctx context.Context, net bootstrap.Network, peers []transport.Peer) error {
	on, err := peerAbortFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	multi := false
	for _, p := range peers {
		multi = multi || !p.SameProcess(peers[c.rank])
	}
	var flags unsafe.Pointer
	if multi && on {
		if c.flagsSeg, err = newSharedFlags(c.cctx, c.rank); err != nil {
			return fmt.Errorf("the host flags in shared memory: %w", err)
		}
		flags = c.flagsSeg.Ptr() // zeroed: a fresh memfd
	} else {
		if flags, err = c.cctx.MemAllocHost(hostFlagsBytes); err != nil {
			return err
		}
		clear(unsafe.Slice((*byte)(flags), hostFlagsBytes))
	}
	c.flags = (*hostFlags)(flags)
	if c.flagsDev, err = c.cctx.HostDevicePointer(flags); err != nil {
		return err
	}
	if !multi {
		return nil
	}
	pp, err := sharePeerFlags(ctx, net, c.rank, peers, topo.ThisMachine(), c.flagsSeg, ipc.SelfPidfd, c.log)
	if err != nil {
		return err
	}
	c.orphans.Store(pp)
	return nil
}

// freeFlags frees the host flags of allocFlags (flags, taken from c
// under flagsMu): unregistered, unmapped and closed when shared.
func (c *Engine) freeFlags(flags *hostFlags) error {
	if flags == nil || c.cctx == nil || c.hostOnly {
		return nil
	}
	if c.flagsSeg != nil {
		flags.freed.Store(1) // the peers' watches of this process end nothing
		err := freeSharedFlags(c.cctx, c.flagsSeg)
		c.flagsSeg = nil
		return err
	}
	return c.cctx.MemFreeHost(unsafe.Pointer(flags))
}

// closePeerPages unmaps the peers' flag pages and stops the watches of
// their processes (before the flags are freed, and at a leak: no kernel
// of c touches them).
func (c *Engine) closePeerPages() error { return c.orphans.Swap(nil).Close() }
