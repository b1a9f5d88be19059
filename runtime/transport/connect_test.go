package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMem hands out addresses from a counter and records what happens.
type fakeMem struct {
	mu     sync.Mutex
	live   map[cuda.DevicePtr]uint64
	zeroed map[cuda.DevicePtr]bool
	failAt int // fail the n-th allocation (1-based); 0: never
	n      int
}

var addrSpace struct {
	mu   sync.Mutex
	next uint64
}

func newFakeMem() *fakeMem {
	return &fakeMem{live: map[cuda.DevicePtr]uint64{}, zeroed: map[cuda.DevicePtr]bool{}}
}

func (m *fakeMem) MemAlloc(n uint64) (cuda.DevicePtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	if m.n == m.failAt {
		return 0, errors.New("out of memory")
	}
	addrSpace.mu.Lock()
	addrSpace.next += (n + 0xfffff) &^ 0xfffff
	p := cuda.DevicePtr(addrSpace.next + 0x7f0000000000)
	addrSpace.mu.Unlock()
	m.live[p] = n
	return p, nil
}

func (m *fakeMem) MemFree(p cuda.DevicePtr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live[p]; !ok {
		return fmt.Errorf("double free %#x", p)
	}
	delete(m.live, p)
	return nil
}

func (m *fakeMem) MemsetD8(p cuda.DevicePtr, v byte, n uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live[p] == n && v == 0 {
		m.zeroed[p] = true
	}
	return nil
}

var sizes = Sizes{1 << 19, 4915200, 1 << 22}

func ringEdges(n, nch, me int) []Edge {
	var es []Edge
	for ch := range nch {
		es = append(es, Edge{ch, me, (me + 1) % n}, Edge{ch, (me + n - 1) % n, me})
	}
	return es
}

func connectAll(t *testing.T, peers []Peer, edges func(r int) []Edge, mems []*fakeMem) ([]*Set, []error) {
	t.Helper()
	n := len(peers)
	nets := bootstrap.NewInProcess(n)
	sets := make([]*Set, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			sets[r], errs[r] = Connect(context.Background(), nets[r], mems[r], r, peers, edges(r), sizes, Options{})
			if errs[r] != nil {
				nets[r].Abort()
			}
		})
	}
	wg.Wait()
	for _, nt := range nets {
		nt.Close()
	}
	return sets, errs
}

func TestConnectRing(t *testing.T) {
	const n, nch = 4, 3
	peers := make([]Peer, n)
	mems := make([]*fakeMem, n)
	for r := range peers {
		peers[r] = Peer{PID: 1, Host: "h", Device: r % 2}
		mems[r] = newFakeMem()
	}
	sets, errs := connectAll(t, peers, func(r int) []Edge { return ringEdges(n, nch, r) }, mems)
	for r := range n {
		require.NoError(t, errs[r])
	}
	steps := map[uint64]bool{}
	for r := range n {
		next, prev := (r+1)%n, (r+n-1)%n
		for ch := range nch {
			s := sets[r].Send[Key{ch, next}]
			rv := sets[next].Recv[Key{ch, r}]
			assert.Equal(t, rv.Buffs, s.Buffs, "sender writes into the receiver's FIFOs")
			assert.Equal(t, rv.Head, s.Head)
			assert.Equal(t, rv.Tail, s.Tail)
			assert.Equal(t, rv.PtrExchange, s.PtrExchange)
			assert.NotEqual(t, rv.Step, s.Step, "each side has its own step word")
			assert.Equal(t, [3]uint32(sizes), s.BuffSizes)
			for p := range 3 {
				assert.Zero(t, s.Buffs[p]%4096)
			}
			assert.NotZero(t, s.Flags&generated.ConnDirect)
			sameGPU := peers[r].Device == peers[next].Device
			assert.Equal(t, sameGPU, s.Flags&generated.ConnSameGpu != 0)
			assert.False(t, steps[s.Step] || steps[rv.Step], "step words are distinct")
			steps[s.Step], steps[rv.Step] = true, true
			_, ok := sets[r].Recv[Key{ch, prev}]
			assert.True(t, ok)
		}
		assert.Len(t, sets[r].Send, nch)
		assert.Len(t, sets[r].Recv, nch)
	}
	for r := range n {
		for p := range mems[r].live {
			assert.True(t, mems[r].zeroed[p], "every allocation is zeroed")
		}
		require.NoError(t, sets[r].Close())
		assert.Empty(t, mems[r].live, "Close frees everything")
	}
}

func TestConnectCrossProcessNeedsIPC(t *testing.T) {
	peers := []Peer{{PID: 1, Host: "h"}, {PID: 2, Host: "h"}}
	mems := []*fakeMem{newFakeMem(), newFakeMem()}
	_, errs := connectAll(t, peers, func(r int) []Edge { return ringEdges(2, 1, r) }, mems)
	for r := range 2 {
		assert.ErrorContains(t, errs[r], "needs CUDA IPC and VMM operations")
		assert.Empty(t, mems[r].live)
	}
}

func TestConnectOtherHost(t *testing.T) {
	peers := []Peer{{PID: 1, Host: "a"}, {PID: 1, Host: "b"}}
	mems := []*fakeMem{newFakeMem(), newFakeMem()}
	_, errs := connectAll(t, peers, func(r int) []Edge { return ringEdges(2, 1, r) }, mems)
	for r := range 2 {
		require.Error(t, errs[r])
		// NET connects them (net_test.go), given host memory to stage in.
		assert.Contains(t, errs[r].Error(), "NET needs host memory registration")
		assert.Empty(t, mems[r].live)
	}
}

func TestConnectDisagreement(t *testing.T) {
	peers := []Peer{{PID: 1, Host: "h"}, {PID: 1, Host: "h"}}
	mems := []*fakeMem{newFakeMem(), newFakeMem()}
	// Rank 0 expects to send on channel 1 as well; rank 1 knows nothing of it.
	_, errs := connectAll(t, peers, func(r int) []Edge {
		if r == 0 {
			return append(ringEdges(2, 1, 0), Edge{1, 0, 1})
		}
		return ringEdges(2, 1, 1)
	}, mems)
	require.Error(t, errs[0])
	assert.Contains(t, errs[0].Error(), "did not set it up")
	assert.Empty(t, mems[0].live)
}

func TestConnectAllocFailure(t *testing.T) {
	peers := []Peer{{PID: 1, Host: "h"}, {PID: 1, Host: "h"}}
	mems := []*fakeMem{newFakeMem(), newFakeMem()}
	mems[1].failAt = 2
	_, errs := connectAll(t, peers, func(r int) []Edge { return ringEdges(2, 2, r) }, mems)
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "out of memory")
	assert.Empty(t, mems[1].live, "a failed Connect frees what it allocated")
}

func TestSizesValidate(t *testing.T) {
	assert.NoError(t, sizes.Validate())
	assert.Error(t, Sizes{0, 2048, 1024}.Validate())
	assert.Error(t, Sizes{1024, 1024, 1024}.Validate())
	assert.NoError(t, Sizes{1024, 0, 1024}.Validate(), "no LL128 FIFOs")
	assert.True(t, Sizes{1024, 0, 1024}.NoLL128())
	assert.ErrorContains(t, Sizes{1024, 0, 0}.Validate(), "SIMPLE buffer of 0 bytes: want a positive multiple of 1024")
	assert.ErrorContains(t, Sizes{1024, 1024, 1024}.Validate(), "LL128 buffer of 1024 bytes: want 0 or a multiple of 2048")
}

// TestPtrExchangeRoom: direct mode uses four 8-byte slots (gen/abi's
// ngConnInfo.ptrExchange); the control block must hold them.
func TestPtrExchangeRoom(t *testing.T) {
	require.GreaterOrEqual(t, ctrlBytes-offPtrExchange, 4*8)
}
