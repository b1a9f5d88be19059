package transport

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A NET staging block is the driver's page-locked allocation
// (MemAllocHost), never the process's own memory registered for the GPU:
// a registered mapping goes with the process's address space, so a
// process killed with its kernel spinning on the staging faults the GPU
// (under MPS, every client of it; the H200 kill-2x1 and kill-2x2 runs),
// where a driver allocation lives as long as the CUDA context. And the
// staging is freed only once the connection is out of the proxy: the
// fake's MemFreeHost checks that, then unmaps the memory, so a proxy pass
// touching it after would fault this process. The survivor of a killed
// peer closes the same way (its proxy failed the connection first).
func TestNETStagingIsDriverMemoryFreedAfterTheProxy(t *testing.T) {
	var vanished atomic.Int32
	sets, mems := connectNETSizes(t, loNet(t, 1, 1), 2, 2, p2pSizes, func(r int, err error) { vanished.Add(1) })
	conns := map[uintptr]*netConn{}
	var mu sync.Mutex
	for r, set := range sets {
		for _, reg := range set.regions {
			if nr, ok := reg.(*netRegion); ok {
				conns[uintptr(unsafe.Pointer(&nr.host[0]))] = nr.pc
			}
		}
		mems[r].onFree = func(p unsafe.Pointer) {
			mu.Lock()
			defer mu.Unlock()
			c, ok := conns[uintptr(p)]
			if !assert.True(t, ok, "rank %d freed %p, no NET staging", r, p) {
				return
			}
			assert.True(t, c.out, "rank %d freed %s's staging while the proxy drove it", r, c.name)
			delete(conns, uintptr(p))
		}
	}
	require.Len(t, conns, 4, "staging blocks: a sending and a receiving one per rank")
	for r, m := range mems {
		m.mu.Lock()
		assert.Equal(t, 2, m.allocs, "rank %d: MemAllocHost calls", r)
		m.mu.Unlock()
	}

	// Some traffic, then rank 1 vanishes (its proxy connections end
	// without goodbye) and rank 0, the survivor, closes.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range 2 {
		for ch := range 2 {
			wg.Go(func() { sendKernel(t, mems[r], sets[r].Send[Key{ch, 1 - r}], ch, 3*generated.Steps, &stop) })
			wg.Go(func() { recvKernel(t, mems[r], sets[r].Recv[Key{ch, 1 - r}], ch, 3*generated.Steps, &stop) })
		}
	}
	wg.Wait()
	for _, reg := range sets[1].regions {
		if nr, ok := reg.(*netRegion); ok {
			require.NoError(t, nr.pc.leave(nr.eng))
			nr.pc.killed = true
		}
	}
	require.NoError(t, sets[1].Close())
	_ = sets[0].Close() // the peer vanished: its error is the drain's or none
	mu.Lock()
	assert.Empty(t, conns, "staging blocks not freed")
	mu.Unlock()
	for r, m := range mems {
		assert.Empty(t, m.regs, "rank %d: host memory left", r)
	}
}
