package enqueue

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// TestP2PSendWindow: a Send whose buffer lies in a window (Task.SendWin)
// gives every part generated.WorkP2pSendWin and the window index in Root;
// a Recv, a Send without a window and a window index beyond the table
// give neither, and the pairing is the same as without windows.
func TestP2PSendWindow(t *testing.T) {
	const bytes = 3 << 20 // several parts on 4 channels
	c := Comm{Rank: 0, NRanks: 2, NChannels: 4, P2PChannelsPerPeer: 4}
	build := func(sendWin, recvWin int32) Plan {
		tasks := []Task{
			{Coll: kspace.SendRecv, Send: 0x10000, Bytes: bytes, Type: kspace.U8, Peer: 1, IsSend: true, SendWin: sendWin},
			{Coll: kspace.SendRecv, Recv: 0x90000000, Bytes: bytes, Type: kspace.U8, Peer: 1, SendWin: recvWin, RecvWin: recvWin},
		}
		p, err := Build(c, tasks, ring(4), GeneratedLookup)
		require.NoError(t, err)
		require.Len(t, p.Launches, 1)
		return p
	}
	plain := build(0, 0)
	win := build(3, 7)
	require.Equal(t, len(plain.Launches[0].Works), len(win.Launches[0].Works))
	require.Greater(t, len(win.Launches[0].Works), 1, "the message splits into parts")
	for i, w := range win.Launches[0].Works {
		require.GreaterOrEqual(t, w.SendPeer, int32(0), "work %d sends", i)
		assert.Equal(t, uint8(generated.WorkP2pSendWin), w.Flags&generated.WorkP2pSendWin, "work %d", i)
		assert.Equal(t, int32(2), w.Root, "work %d: Root is SendWin-1", i)
		p := plain.Launches[0].Works[i]
		assert.Zero(t, p.Flags, "work %d without a window", i)
		assert.Equal(t, int32(-1), p.Root, "work %d without a window", i)
		p.Flags, p.Root = w.Flags, w.Root
		assert.Equal(t, p, w, "work %d: only the flag and Root differ", i)
	}
	// A Recv's SendWin/RecvWin change nothing: a receive needs no window.
	recvOnly := func(win int32) []generated.DevWork {
		p, err := Build(c, []Task{{Coll: kspace.SendRecv, Recv: 0x90000000, Bytes: bytes, Type: kspace.U8, Peer: 1,
			SendWin: win, RecvWin: win}}, ring(4), GeneratedLookup)
		require.NoError(t, err)
		return p.Launches[0].Works
	}
	assert.Equal(t, recvOnly(0), recvOnly(5))
	// An index outside the window table is no window.
	over := build(generated.DirectMaxWindows+1, 0)
	for i, w := range over.Launches[0].Works {
		assert.Zero(t, w.Flags&generated.WorkP2pSendWin, "work %d", i)
	}
}

// handshakeFaults are deliberate protocol bugs that TestP2PWindowHandshake
// must catch, so that the simulation is known to be able to fail.
type handshakeFaults struct {
	genGE     bool // the receiver takes any generation >= r+1 as this step's publication
	tailEarly bool // a publishing sender posts tail before the receiver returned the credit
}

// simulateHandshake runs one connection's sender and receiver as
// devicesrc/sendrecv.h's window handshake does, one shared-memory access at
// a time in a random order: works[k] is true when the sender's k-th message
// lies in a window (it publishes; the receiver copies) and false when it
// runs the FIFO (steps[k] steps of NG_STEPS slots). It returns an error
// when the receiver takes a message by the wrong path or reads another
// message's data, and when the two deadlock.
func simulateHandshake(rng *rand.Rand, works []bool, steps []int, f handshakeFaults) error {
	const slots = generated.Steps
	var (
		xch        [5]uint64 // [0] reference (message id + 1), [1] generation, [4] verdict
		head, tail uint64
		fifo       [slots]uint64 // message id << 32 | step index + 1
	)
	// The sender.
	type op func() bool // false: blocked, retry
	var sendOps []op
	var s uint64
	for k, win := range works {
		if win {
			var mine uint64
			sendOps = append(sendOps,
				func() bool { mine = s; xch[0] = uint64(k) + 1; return true },
				func() bool { xch[1] = mine + 1; return true }, // after the fence
			)
			if f.tailEarly {
				sendOps = append(sendOps, func() bool { tail = mine + 1; return true })
			}
			sendOps = append(sendOps,
				func() bool { return head >= mine+1 },
				func() bool { tail = mine + 1; s = mine + 1; return true },
			)
			continue
		}
		for i := range steps[k] {
			var mine uint64
			sendOps = append(sendOps,
				func() bool { mine = s; return mine < slots || head >= mine+1-slots },
				func() bool { fifo[mine%slots] = uint64(k)<<32 | uint64(i+1); return true },
				func() bool { tail = mine + 1; s = mine + 1; return true },
			)
		}
	}
	// The receiver: a state machine, since its path depends on what it saw.
	var (
		r          uint64
		k, i       int // message, FIFO step within it
		state      int // 0 poll generation, 1 poll tail, 2 FIFO step, 3 window copy
		recvErr    error
		sp         int // next sender op
		receiverOK = func() bool { return k == len(works) }
	)
	recvStep := func() bool {
		switch state {
		case 0:
			g := xch[1]
			if g == r+1 || (f.genGE && g >= r+1) {
				state = 3
				return true
			}
			state = 1
			return false // not yet: the poll goes on (counts as a stall)
		case 1:
			if tail >= r+1 {
				state, i = 2, 0
				return true
			}
			state = 0
			return false
		case 2:
			if tail < r+1 {
				return false
			}
			if got, want := fifo[r%slots], uint64(k)<<32|uint64(i+1); got != want {
				recvErr = fmt.Errorf("message %d step %d by FIFO read slot data %#x, want %#x", k, i, got, want)
				return true
			}
			head, r, i = r+1, r+1, i+1
			if !works[k] && i == steps[k] {
				k, state = k+1, 0
			} else if works[k] {
				recvErr = fmt.Errorf("message %d was published (window) but the receiver ran the FIFO", k)
			}
			return true
		case 3:
			if !works[k] {
				recvErr = fmt.Errorf("message %d runs the FIFO but the receiver took generation %d as a publication at step %d", k, xch[1], r)
				return true
			}
			if xch[0] != uint64(k)+1 {
				recvErr = fmt.Errorf("message %d: the receiver copied message %d's window", k, xch[0]-1)
				return true
			}
			xch[4] = 1
			head, r = r+1, r+1
			k, state = k+1, 0
			return true
		}
		return false
	}
	for stalls := 0; ; {
		if recvErr != nil {
			return recvErr
		}
		senderDone := sp == len(sendOps)
		if senderDone && receiverOK() {
			return nil
		}
		progressed := false
		if !senderDone && (receiverOK() || rng.IntN(2) == 0) {
			if sendOps[sp]() {
				sp++
				progressed = true
			}
		} else if !receiverOK() {
			progressed = recvStep()
		}
		if progressed {
			stalls = 0
		} else if stalls++; stalls > 1000 {
			return fmt.Errorf("deadlock: sender at op %d of %d, receiver at message %d of %d (state %d)", sp, len(sendOps), k, len(works), state)
		}
	}
}

// TestP2PWindowHandshake simulates the window handshake of
// devicesrc/sendrecv.h on random sequences of window and FIFO messages and
// random interleavings: the receiver always takes a message by the path the
// sender chose, reads that message's data and never deadlocks. Two
// deliberately broken variants must be caught.
func TestP2PWindowHandshake(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	gen := func() ([]bool, []int) {
		n := 1 + rng.IntN(12)
		works, steps := make([]bool, n), make([]int, n)
		for k := range works {
			works[k] = rng.IntN(2) == 0
			steps[k] = 1 + rng.IntN(2*generated.Steps)
		}
		return works, steps
	}
	for range 3000 {
		works, steps := gen()
		require.NoError(t, simulateHandshake(rng, works, steps, handshakeFaults{}), "works %v steps %v", works, steps)
	}
	for _, f := range []handshakeFaults{{genGE: true}, {tailEarly: true}} {
		caught := 0
		for range 3000 {
			works, steps := gen()
			if simulateHandshake(rng, works, steps, f) != nil {
				caught++
			}
		}
		assert.Positive(t, caught, "fault %+v goes unnoticed", f)
		t.Logf("fault %+v caught in %d of 3000 runs", f, caught)
	}
}
