// Package transport sets up the connections between the ranks of a
// communicator.
//
// Every connection is one direction (From sends to To) on one channel. The
// receiver owns, per connection, the per-protocol FIFOs (LL, LL128,
// SIMPLE), the head and tail counters, its step word and the ptrExchange
// slots, all zeroed; the sender keeps only its own step word, in its own
// device memory. How the receiver's memory is allocated and how the sender
// reaches it is the business of a Transport:
//
//   - P2P, ranks of one process: device memory from cuMemAlloc, used
//     through its address ("P2P/direct pointer").
//   - P2P, ranks of different processes on one host: device memory from
//     cuMemCreate exported as a POSIX file descriptor, passed over a Unix
//     domain socket and mapped by the sender ("P2P/CUMEM"); or, where VMM
//     is unavailable or NCCL_CUMEM_ENABLE=0, legacy CUDA IPC handles
//     ("P2P/IPC").
//   - SHM: host shared memory (memfd), page-locked and mapped for the GPU
//     in both processes ("SHM/direct/direct"), when P2P is disabled or
//     impossible.
//
// Per connection the receiver picks the first transport, in NCCL's order
// P2P, SHM, NET, whose CanConnect accepts the pair under the Policy
// (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE, NCCL_CUMEM_ENABLE),
// and publishes its choice; the sender follows it. The receiver allocates
// one region per sending rank and transport, holding all of that sender's
// connections.
//
//   - NET: ranks on different hosts (or anywhere, when P2P and SHM cannot):
//     host-pinned staging blocks on both sides with the receiver's layout,
//     the proxy (runtime/proxy) moving each step over the network
//     (runtime/net: TCP sockets). See NET.
//
// P2P and SHM need no host-side progress: the kernels move every byte.
package transport

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Peer identifies a rank and where it runs.
type Peer struct {
	Rank   int // the rank in its communicator, for messages
	PID    int
	Host   string
	Device int
	// BusID is the GPU's PCI bus id; where both sides know it, it decides
	// whether two ranks of different processes share a GPU (their device
	// ordinals may differ under different CUDA_VISIBLE_DEVICES).
	BusID string
}

// SameProcess reports whether p and q are ranks of one process.
func (p Peer) SameProcess(q Peer) bool { return p.PID == q.PID && p.Host == q.Host }

// SameGPU reports whether p and q run on the same GPU.
func (p Peer) SameGPU(q Peer) bool {
	if p.Host != q.Host {
		return false
	}
	if p.BusID != "" && q.BusID != "" {
		return strings.EqualFold(p.BusID, q.BusID)
	}
	return p.Device == q.Device
}

// Process names p's process: "pid 123 on host".
func (p Peer) Process() string { return fmt.Sprintf("pid %d on %s", p.PID, p.Host) }

func (p Peer) String() string {
	return fmt.Sprintf("rank %d (pid %d on %s, device %d)", p.Rank, p.PID, p.Host, p.Device)
}

// Path is how far apart two GPUs are, in NCCL's path types (NCCL_P2P_LEVEL).
type Path int

// The path types, nearest first.
const (
	PathLOC Path = iota // the same GPU
	PathNVL             // NVLink
	PathPIX             // one PCIe switch
	PathPXB             // several PCIe switches
	PathPHB             // through the CPU's host bridge
	PathSYS             // across CPU sockets
)

var pathNames = [...]string{"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"}

func (p Path) String() string {
	if p >= 0 && int(p) < len(pathNames) {
		return pathNames[p]
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// ParsePath reads an NCCL_P2P_LEVEL value: a path name (case-insensitive)
// or one of NCCL's legacy integers (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 or more
// SYS).
func ParsePath(s string) (Path, error) {
	s = strings.TrimSpace(s)
	for i, n := range pathNames {
		if strings.EqualFold(s, n) {
			return Path(i), nil
		}
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		legacy := [...]Path{PathLOC, PathPIX, PathPXB, PathPHB, PathSYS}
		return legacy[min(n, len(legacy)-1)], nil
	}
	return 0, fmt.Errorf("transport: NCCL_P2P_LEVEL=%q: want LOC, NVL, PIX, PXB, PHB, SYS or an integer from 0", s)
}

// Link is what joins a rank's GPU to a peer's.
type Link struct {
	Path Path
	// PeerAccess reports whether the sender's GPU can load and store the
	// receiver's device memory (true on one GPU).
	PeerAccess bool
}

// DefaultP2PLevel is the farthest path P2P uses when NCCL_P2P_LEVEL is not
// set (NCCL's default on most machines).
const DefaultP2PLevel = PathPXB

// Policy is what the user allows.
type Policy struct {
	P2PDisable bool // NCCL_P2P_DISABLE
	SHMDisable bool // NCCL_SHM_DISABLE
	// P2PLevel is NCCL_P2P_LEVEL: when P2PLevelSet, P2P connects GPUs at
	// most this far apart (LOC: never); otherwise DefaultP2PLevel applies.
	P2PLevel    Path
	P2PLevelSet bool
	// NoCuMem is NCCL_CUMEM_ENABLE=0: P2P between processes uses legacy
	// CUDA IPC handles instead of VMM file descriptors.
	NoCuMem bool
}

// Level is the farthest path P2P may use.
func (p Policy) Level() Path {
	if p.P2PLevelSet {
		return p.P2PLevel
	}
	return DefaultP2PLevel
}

// PolicyFromEnv builds the policy from NCCL_P2P_DISABLE and
// NCCL_SHM_DISABLE (already parsed by runtime/config) and from
// NCCL_P2P_LEVEL and NCCL_CUMEM_ENABLE, read through getenv.
func PolicyFromEnv(p2pDisable, shmDisable bool, getenv func(string) string) (Policy, error) {
	p := Policy{P2PDisable: p2pDisable, SHMDisable: shmDisable}
	if v := getenv("NCCL_P2P_LEVEL"); v != "" {
		l, err := ParsePath(v)
		if err != nil {
			return p, err
		}
		p.P2PLevel, p.P2PLevelSet = l, true
	}
	switch v := strings.TrimSpace(getenv("NCCL_CUMEM_ENABLE")); v {
	case "", "1", "2":
	case "0":
		p.NoCuMem = true
	default:
		return p, fmt.Errorf("transport: NCCL_CUMEM_ENABLE=%q: want 0 or 1", v)
	}
	return p, nil
}

// Transport is one way of connecting a sending rank to a receiving rank.
// Implementations must be safe for concurrent use by the ranks of one
// process.
type Transport interface {
	// Name is the transport's name in NCCL's logs: "P2P", "SHM", "NET".
	Name() string
	// CanConnect reports whether the transport connects send to recv,
	// joined by link, under pol; when not, why.
	CanConnect(pol Policy, send, recv Peer, link Link) (ok bool, why string)
	// Flags are the NG_CONN_* bits (generated.Conn*) of a connection from
	// send to recv.
	Flags(send, recv Peer) uint32
	// SetupRecv allocates, on the receiving rank, size zeroed bytes for
	// every connection from send, and returns them with the connect info
	// the sender needs (descriptors travel through env.Export).
	SetupRecv(env *Env, send Peer, size uint64) (Region, error)
	// ConnectSend maps, on the sending rank, the region that rank recv
	// published with info.
	ConnectSend(ctx context.Context, env *Env, recv int, peer Peer, info []byte) (Region, error)
}

// Region is the memory of one side of the connections between two ranks.
type Region interface {
	// Addr is the region's device address in this process.
	Addr() uint64
	// Info is the connect info the receiving side publishes (nil on the
	// sending side); it is small and self-contained (no pointers valid only
	// here, except in one process).
	Info() []byte
	// Mode completes the transport's name in the logs ("direct pointer",
	// "CUMEM", "IPC", "direct/direct").
	Mode() string
	// Close releases the region (unmaps, frees, closes descriptors). The
	// kernels that use it must be done.
	Close() error
}

// Default lists the transports in NCCL's order of preference.
func Default() []Transport { return []Transport{P2P{}, SHM{}, NET{}} }

// Select returns the first of ts that connects send to recv, or an error
// that says why none does.
func Select(ts []Transport, pol Policy, send, recv Peer, link Link) (Transport, error) {
	var why []string
	for _, t := range ts {
		ok, reason := t.CanConnect(pol, send, recv, link)
		if ok {
			return t, nil
		}
		why = append(why, t.Name()+": "+reason)
	}
	return nil, fmt.Errorf("transport: %s to %s: %w (%s)", send, recv, ErrNoTransport, strings.Join(why, "; "))
}
