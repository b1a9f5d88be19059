package transport

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePath(t *testing.T) {
	for in, want := range map[string]Path{"LOC": PathLOC, "nvl": PathNVL, "PIX": PathPIX, " PXB ": PathPXB, "PHB": PathPHB, "SYS": PathSYS,
		"0": PathLOC, "1": PathPIX, "2": PathPXB, "3": PathPHB, "4": PathSYS, "7": PathSYS} {
		got, err := ParsePath(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "NVLINK", "-1", "x"} {
		_, err := ParsePath(bad)
		assert.Error(t, err, bad)
	}
}

func TestPolicyFromEnv(t *testing.T) {
	env := envmap.Getenv
	p, err := PolicyFromEnv(false, false, env())
	require.NoError(t, err)
	assert.Equal(t, DefaultP2PLevel, p.Level())
	assert.False(t, p.NoCuMem)
	p, err = PolicyFromEnv(true, true, env("NCCL_P2P_LEVEL", "NVL", "NCCL_CUMEM_ENABLE", "0"))
	require.NoError(t, err)
	assert.Equal(t, Policy{P2PDisable: true, SHMDisable: true, P2PLevel: PathNVL, P2PLevelSet: true, NoCuMem: true}, p)
	_, err = PolicyFromEnv(false, false, env("NCCL_P2P_LEVEL", "FAR"))
	assert.ErrorContains(t, err, "NCCL_P2P_LEVEL")
	_, err = PolicyFromEnv(false, false, env("NCCL_CUMEM_ENABLE", "yes"))
	assert.ErrorContains(t, err, "NCCL_CUMEM_ENABLE")
}

// TestSelect covers NCCL's order (P2P, SHM, NET) and the rules that skip
// a transport.
func TestSelect(t *testing.T) {
	a := Peer{PID: 1, Host: "h", Device: 0, BusID: "0000:01:00.0"}
	b := Peer{PID: 2, Host: "h", Device: 1, BusID: "0000:02:00.0"}
	sameGPU := Peer{PID: 3, Host: "h", Device: 5, BusID: "0000:01:00.0"} // a's GPU under another ordinal
	far := Peer{PID: 4, Host: "other", Device: 0}
	nvl := Link{Path: PathNVL, PeerAccess: true}
	pxb := Link{Path: PathPXB, PeerAccess: true}
	phb := Link{Path: PathPHB, PeerAccess: true}
	noAccess := Link{Path: PathSYS}
	loc := Link{Path: PathLOC, PeerAccess: true}
	level := func(p Path) Policy { return Policy{P2PLevel: p, P2PLevelSet: true} }
	cases := []struct {
		name       string
		pol        Policy
		send, recv Peer
		link       Link
		want       string // transport name, or a fragment of the error
	}{
		{"nvlink", Policy{}, a, b, nvl, "P2P"},
		{"pcie within the default level", Policy{}, a, b, pxb, "P2P"},
		{"host bridge beyond the default level", Policy{}, a, b, phb, "SHM"},
		{"host bridge within NCCL_P2P_LEVEL=PHB", level(PathPHB), a, b, phb, "P2P"},
		{"NCCL_P2P_LEVEL=NVL without NVLink", level(PathNVL), a, b, pxb, "SHM"},
		{"NCCL_P2P_LEVEL=LOC", level(PathLOC), a, b, nvl, "SHM"},
		{"no peer access", level(PathSYS), a, b, noAccess, "SHM"},
		{"NCCL_P2P_DISABLE", Policy{P2PDisable: true}, a, b, nvl, "SHM"},
		{"same GPU, two processes", Policy{}, a, sameGPU, loc, "P2P"},
		{"both disabled", Policy{P2PDisable: true, SHMDisable: true}, a, b, nvl, "NET"},
		{"other host", Policy{}, a, far, pxb, "NET"},
	}
	for _, c := range cases {
		tr, err := Select(Default(), c.pol, c.send, c.recv, c.link)
		if c.want == "P2P" || c.want == "SHM" || c.want == "NET" {
			require.NoError(t, err, c.name)
			assert.Equal(t, c.want, tr.Name(), c.name)
		} else {
			require.Error(t, err, c.name)
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	_, err := Select([]Transport{P2P{}, SHM{}}, Policy{P2PDisable: true}, a, far, pxb)
	require.ErrorIs(t, err, ErrNoTransport)
	assert.ErrorContains(t, err, "P2P: disabled by NCCL_P2P_DISABLE; SHM: different hosts")
	assert.True(t, a.SameGPU(sameGPU), "bus ids decide, not ordinals")
	assert.False(t, a.SameGPU(Peer{PID: 1, Host: "h", Device: 0, BusID: "0000:02:00.0"}))
}

func TestFlags(t *testing.T) {
	a := Peer{PID: 1, Host: "h", Device: 0}
	assert.Equal(t, uint32(generated.ConnDirect|generated.ConnSameGpu), P2P{}.Flags(a, Peer{PID: 1, Host: "h", Device: 0}))
	assert.Equal(t, uint32(generated.ConnDirect), P2P{}.Flags(a, Peer{PID: 1, Host: "h", Device: 1}))
	assert.Equal(t, uint32(generated.ConnXproc), P2P{}.Flags(a, Peer{PID: 2, Host: "h", Device: 0}),
		"no direct mode across processes; system fences; a shared control block for SendRecv by window")
	assert.Equal(t, P2P{}.Flags(a, Peer{PID: 2, Host: "h", Device: 0}), P2P{}.Flags(Peer{PID: 2, Host: "h", Device: 0}, a),
		"both ends of a connection agree on the flags (the window handshake depends on it)")
	assert.Zero(t, SHM{}.Flags(a, Peer{PID: 1, Host: "h", Device: 1}))
}

// fakeProcesses describes n ranks, each in a process of its own on GPU r
// of one host, with their fake devices.
func fakeProcesses(n int) ([]Peer, []*fakeIPC) {
	peers := make([]Peer, n)
	devs := make([]*fakeIPC, n)
	for r := range n {
		peers[r] = Peer{PID: 100 + r, Host: "h", Device: r}
		devs[r] = newFakeIPC(r)
	}
	return peers, devs
}

// connectFake connects n ranks posing as the given processes over fake
// IPC devices and returns the sets, the errors and the log lines.
func connectFake(t *testing.T, peers []Peer, devs []*fakeIPC, nch int, pol Policy) ([]*Set, []error, []string) {
	t.Helper()
	return connectFakeVia(t, peers, devs, nch, pol, nil)
}

// connectFakeVia is connectFake with each rank's network passed through
// wrap (nil: as is).
func connectFakeVia(t *testing.T, peers []Peer, devs []*fakeIPC, nch int, pol Policy,
	wrap func(r int, nt bootstrap.Network) bootstrap.Network) ([]*Set, []error, []string) {
	t.Helper()
	n := len(peers)
	nets := bootstrap.NewInProcess(n)
	sets := make([]*Set, n)
	errs := make([]error, n)
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			opts := Options{Policy: pol, Log: func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() }}
			var nt bootstrap.Network = nets[r]
			if wrap != nil {
				nt = wrap(r, nt)
			}
			sets[r], errs[r] = Connect(context.Background(), nt, devs[r], r, peers, ringEdges(n, nch, r), sizes, opts)
			if errs[r] != nil {
				nets[r].Abort()
			}
		})
	}
	wg.Wait()
	for _, nt := range nets {
		nt.Close()
	}
	return sets, errs, lines
}

func openFDs(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// TestConnectAcrossProcesses connects a ring of ranks that pose as
// separate processes: the receivers' buffers travel as descriptors
// (VMM export, shared memory) over the Unix socket rendezvous, and what a
// sender stores through its mapping is what the receiver reads through its
// own.
func TestConnectAcrossProcesses(t *testing.T) {
	for _, c := range []struct {
		name  string
		pol   Policy
		noVMM bool
		via   string
	}{
		{"P2P/CUMEM", Policy{}, false, "P2P/CUMEM"},
		{"SHM", Policy{P2PDisable: true}, false, "SHM/direct/direct"},
		{"P2P/IPC fallback", Policy{}, true, "P2P/IPC"},
		{"P2P/IPC by NCCL_CUMEM_ENABLE=0", Policy{NoCuMem: true}, false, "P2P/IPC"},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n, nch = 3, 2
			fds := openFDs(t)
			peers, devs := fakeProcesses(n)
			for _, d := range devs {
				d.noVMM = c.noVMM
			}
			sets, errs, lines := connectFake(t, peers, devs, nch, c.pol)
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
			}
			assert.Len(t, lines, n*nch)
			for _, l := range lines {
				assert.True(t, strings.HasSuffix(l, " via "+c.via), l)
			}
			assert.Contains(t, lines, "Channel 01/0 : 2[2] -> 0[0] via "+c.via)
			for r := range n {
				assert.Equal(t, c.via == "SHM/direct/direct", sets[r].Uses("SHM"), "rank %d", r)
				assert.Equal(t, c.via != "SHM/direct/direct", sets[r].Uses("P2P"), "rank %d", r)
			}
			for r := range n {
				next := (r + 1) % n
				for ch := range nch {
					s := sets[r].Send[Key{ch, next}]
					rv := sets[next].Recv[Key{ch, r}]
					assert.Equal(t, c.via, sets[r].Via[Key{ch, next}])
					want := uint32(generated.ConnXproc) // a control block both sides map
					if c.via == "SHM/direct/direct" {
						want = 0
					}
					assert.Equal(t, want, s.Flags, "no direct mode, system fences")
					assert.Equal(t, want, rv.Flags, "both ends agree")
					assert.Equal(t, [3]uint32(sizes), s.BuffSizes)
					if c.via == "P2P/IPC" {
						continue // the fake's IPC handles carry no memory
					}
					// The sender posts tail and writes the SIMPLE FIFO's last
					// byte; the receiver sees both.
					tail, err := devs[r].translate(s.Tail, 8)
					require.NoError(t, err)
					last, err := devs[r].translate(s.Buffs[2]+uint64(sizes[2])-1, 1)
					require.NoError(t, err)
					tail[0], last[0] = byte(10+ch), byte(20+r)
					rtail, err := devs[next].translate(rv.Tail, 8)
					require.NoError(t, err)
					rlast, err := devs[next].translate(rv.Buffs[2]+uint64(sizes[2])-1, 1)
					require.NoError(t, err)
					assert.Equal(t, byte(10+ch), rtail[0], "rank %d -> %d ch %d: tail", r, next, ch)
					assert.Equal(t, byte(20+r), rlast[0], "rank %d -> %d ch %d: FIFO", r, next, ch)
				}
			}
			for r := range n {
				require.NoError(t, sets[r].Close())
				assert.Zero(t, devs[r].liveCount(), "rank %d: Close releases every mapping, handle and allocation", r)
			}
			assert.Equal(t, fds, openFDs(t), "no descriptor left open")
		})
	}
}

// TestConnectSHMInProcess: with P2P disabled, ranks of one process use
// the receiver's registered shared memory directly.
func TestConnectSHMInProcess(t *testing.T) {
	const n = 2
	peers := []Peer{{PID: 7, Host: "h", Device: 0}, {PID: 7, Host: "h", Device: 1}}
	devs := []*fakeIPC{newFakeIPC(0), newFakeIPC(1)}
	sets, errs, lines := connectFake(t, peers, devs, 1, Policy{P2PDisable: true})
	for r := range n {
		require.NoError(t, errs[r])
	}
	assert.Contains(t, lines, "Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct")
	assert.Equal(t, sets[1].Recv[Key{0, 0}].Buffs, sets[0].Send[Key{0, 1}].Buffs, "one process: the same addresses")
	for r := range n {
		require.NoError(t, sets[r].Close())
		assert.Zero(t, devs[r].liveCount())
	}
}

// TestConnectMixed: ranks 0 and 1 share a process, rank 2 is apart: the
// in-process pair uses direct pointers, the others CUMEM.
func TestConnectMixed(t *testing.T) {
	peers := []Peer{{PID: 1, Host: "h", Device: 0}, {PID: 1, Host: "h", Device: 1}, {PID: 2, Host: "h", Device: 2}}
	devs := []*fakeIPC{newFakeIPC(0), newFakeIPC(1), newFakeIPC(2)}
	sets, errs, lines := connectFake(t, peers, devs, 1, Policy{})
	for r := range 3 {
		require.NoError(t, errs[r])
	}
	assert.ElementsMatch(t, []string{
		"Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer",
		"Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM",
		"Channel 00/0 : 2[2] -> 0[0] via P2P/CUMEM",
	}, lines)
	assert.Equal(t, uint32(generated.ConnDirect), sets[0].Send[Key{0, 1}].Flags)
	assert.False(t, sets[0].Uses("SHM"))
	for r := range 3 {
		require.NoError(t, sets[r].Close())
		assert.Zero(t, devs[r].liveCount())
	}
}

// TestConnectIPCBoundsThePublishedSize: a receiver whose legacy IPC
// allocation is smaller than the size it publishes (here rank 1, whose
// handles describe 4 KiB less than it allocated) is refused by its sender,
// which checks the published size against the allocation it opened
// (cuMemGetAddressRange), naming the rank; nothing is left open.
func TestConnectIPCBoundsThePublishedSize(t *testing.T) {
	const n, nch = 3, 2
	peers, devs := fakeProcesses(n)
	devs[1].ipcShort = 4096
	sets, errs, _ := connectFake(t, peers, devs, nch, Policy{NoCuMem: true})
	require.Error(t, errs[0], "rank 0 sends to rank 1")
	assert.Contains(t, errs[0].Error(), "rank 1's IPC buffers: it published")
	assert.Contains(t, errs[0].Error(), "but the allocation opened is")
	for r := range n {
		if sets[r] != nil {
			require.NoError(t, sets[r].Close())
		}
		assert.Zero(t, devs[r].liveCount(), "rank %d: every mapping, handle and allocation released", r)
	}
}

// subAllocIPC is a fake device whose legacy IPC mappings lie inside a
// larger block, as they may with the real driver, which sub-allocates
// small cuMemAlloc allocations from 2 MiB blocks and shares the whole
// block through IPC: MemGetAddressRange names the block, which starts
// before the address cuIpcOpenMemHandle returned.
type subAllocIPC struct{ *fakeIPC }

const subAllocLead = 0x600 // the other allocations of the block before this one

func (s subAllocIPC) MemGetAddressRange(p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	base, n, err := s.fakeIPC.MemGetAddressRange(p)
	return base - subAllocLead, n + subAllocLead, err
}

// TestConnectIPCSubAllocated: a sender whose opened IPC mapping lies
// inside a larger range (the pointer is not the range's base) accepts
// the receiver's published size as long as it fits in the range after
// the pointer, and still refuses one that does not.
func TestConnectIPCSubAllocated(t *testing.T) {
	for _, short := range []uint64{0, subAllocLead + 4096} {
		const n, nch = 2, 2
		peers, devs := fakeProcesses(n)
		devs[1].ipcShort = short
		nets := bootstrap.NewInProcess(n)
		sets, errs := testutil.OnEveryRank(n, func(r int) (*Set, error) {
			s, err := Connect(context.Background(), nets[r], subAllocIPC{devs[r]}, r, peers, ringEdges(n, nch, r), sizes, Options{Policy: Policy{NoCuMem: true}})
			if err != nil {
				nets[r].Abort()
			}
			return s, err
		})
		for _, nt := range nets {
			nt.Close()
		}
		if short == 0 {
			require.NoError(t, errors.Join(errs...), "a sub-allocated mapping holding the published size")
			assert.Equal(t, "P2P/IPC", sets[0].Via[Key{0, 1}])
		} else {
			require.Error(t, errs[0], "rank 0 sends to rank 1, which publishes more than its range holds")
			assert.Contains(t, errs[0].Error(), "rank 1's IPC buffers: it published")
		}
		for r := range n {
			if sets[r] != nil {
				require.NoError(t, sets[r].Close())
			}
			assert.Zero(t, devs[r].liveCount(), "rank %d: every mapping, handle and allocation released", r)
		}
	}
}
