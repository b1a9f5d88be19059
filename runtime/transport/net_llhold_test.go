package transport

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/proxy"
)

// TestNETLLStepShippedWhole: an LL step whose size word says more lines
// are coming is held until they are all ready, then shipped as one
// message, however its lines trickle in; a step longer than llHoldLines
// streams in pieces of at least llHoldLines. Every line arrives intact.
// (Session 13: steps shipped piece by piece cost a socket write each and
// made 2 KiB over NET 2.3 times 8 B's time.)
func TestNETLLStepShippedWhole(t *testing.T) {
	sizes := Sizes{generated.Steps * 16 * (llHoldLines + 1024), netSizes[1], netSizes[2]}
	sets, mems := connectNETSizes(t, loNet(t, 1, 1), 2, 1, sizes, func(r int, err error) { t.Errorf("rank %d: proxy error: %v", r, err) })
	defer func() {
		for _, s := range sets {
			require.NoError(t, s.Close())
		}
	}()
	send, recv := sets[0].Send[Key{0, 1}], sets[1].Recv[Key{0, 0}]
	require.NotZero(t, send.Flags&generated.ConnStepSizes)
	slotOf := func(m *hostMem, ci generated.ConnInfo, s uint64) []byte {
		slot := uint64(ci.BuffSizes[0]) / generated.Steps
		return m.at(ci.Buffs[0]+(s%generated.Steps)*slot, slot)
	}
	write := func(buf []byte, s uint64, from, to int) {
		f := uint64(llFlag(s))
		for l := from; l < to; l++ {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), uint64(stepByte(0, s, 2*l+1))|f<<32)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), uint64(stepByte(0, s, 2*l))|f<<32)
		}
	}
	// Steps: lines, written in pieces ending at these lines, with a pause
	// after each piece long enough for many proxy passes.
	plan := []struct {
		lines  int
		pieces []int
	}{
		{300, []int{1, 150, 300}},
		{1, []int{1}},
		{llHoldLines + 1000, []int{llHoldLines + 500, llHoldLines + 1000}},
	}
	for s, st := range plan {
		s := uint64(s)
		buf := slotOf(mems[0], send, s)
		postLLSize(mems[0], send, s, st.lines)
		from := 0
		for _, to := range st.pieces {
			write(buf, s, from, to)
			from = to
			time.Sleep(20 * time.Millisecond)
		}
	}
	for s, st := range plan {
		s := uint64(s)
		buf := slotOf(mems[1], recv, s)
		for l := range st.lines {
			require.True(t, spin(t, fmt.Sprintf("step %d line %d", s, l), func() bool { return llReady(buf[16*l:], llFlag(s)) }))
			require.Equal(t, stepByte(0, s, 2*l), buf[16*l], "step %d line %d", s, l)
			require.Equal(t, stepByte(0, s, 2*l+1), buf[16*l+8], "step %d line %d", s, l)
		}
	}
	sc := netConnOf(t, sets[0], true)
	e := proxy.Acquire()
	require.NoError(t, sc.leave(e))
	e.Release()
	t.Log(sc.stats.summary(sc))
	// One message each for the first two steps; the long one in two
	// pieces (its first llHoldLines+500 lines, then the rest).
	assert.Equal(t, uint64(4), sc.stats.msgs[kindLL], "LL messages")
}
