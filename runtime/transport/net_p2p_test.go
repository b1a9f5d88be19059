package transport

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/stretchr/testify/require"
)

// p2pOp is one work on a connection as the fake hosts' matrix runs it
// (SendRecv count=1, 1001, 65539 of a 4-byte type, LL below 16 KiB and
// SIMPLE above): the protocol and the bytes, which the kernels cut into
// steps of the protocol's capacity, the last one partial.
type p2pOp struct {
	proto int // 0 LL, 2 SIMPLE
	bytes int
}

// p2pSteps is the matrix's sequence: per type, three SendRecvs; two types.
var p2pSteps = []p2pOp{{0, 4}, {0, 4004}, {2, 262156}, {0, 4}, {0, 4004}, {2, 262156}}

// p2pSizes are the defaults' proportions, scaled down: SIMPLE slots of
// 64 KiB (the 262156-byte op is 4 full steps and one of 12 bytes), LL
// slots of 8 KiB (4 KiB of data: 4004 bytes in one step).
var p2pSizes = Sizes{64 << 10, 16 << 10, 512 << 10}

// stepCap is the bytes one step of proto carries (ngStepElems, bytes).
func stepCap(sizes Sizes, proto int) int {
	slot := int(sizes[proto]) / generated.Steps
	if proto == 0 {
		return slot / 16 * 8 &^ 15
	}
	return slot &^ 15
}

// p2pKernel is one side (send or receive) of a connection running ops as
// ng_prims.h does: the sender waits for credit, writes the step (SIMPLE:
// the bytes, the size word, then tail; LL: the lines, in an order of
// its threads' choosing), the receiver waits for tail or each line's
// flags, checks the data and stores head.
func p2pKernel(t *testing.T, m *hostMem, ci generated.ConnInfo, sizes Sizes, ch int, send bool, ops []p2pOp, rounds int, stop *atomic.Bool) {
	head, tail := m.word(ci.Head), m.word(ci.Tail)
	rng := rand.New(rand.NewPCG(uint64(ch), 7))
	var s uint64
	side := map[bool]string{true: "send", false: "recv"}[send]
	for round := range rounds {
		for oi, op := range ops {
			capb := stepCap(sizes, op.proto)
			for off := 0; off < op.bytes; off += capb {
				n := min(capb, op.bytes-off)
				what := fmt.Sprintf("ch%d %s round %d op %d (%d B, proto %d) step %d", ch, side, round, oi, op.bytes, op.proto, s)
				slot := uint64(ci.BuffSizes[op.proto]) / generated.Steps
				buf := m.at(ci.Buffs[op.proto]+(s%generated.Steps)*slot, slot)
				if send {
					if !spin(t, what+": credit", func() bool { return stop.Load() || atomic.LoadUint64(head)+generated.Steps > s }) || stop.Load() {
						return
					}
					if op.proto == 2 {
						for i := range n {
							buf[i] = stepByte(ch, s, i)
						}
						postSize(m, ci, s, n)
						atomic.StoreUint64(tail, s+1)
					} else {
						f := uint64(llFlag(s))
						lines := (n + 7) / 8
						postLLSize(m, ci, s, lines)
						for _, l := range rng.Perm(lines) {
							lo := uint64(stepByte(ch, s, 2*l)) | f<<32
							hi := uint64(stepByte(ch, s, 2*l+1)) | f<<32
							atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), hi)
							atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), lo)
						}
					}
				} else {
					if op.proto == 2 {
						if !spin(t, what+": tail", func() bool { return stop.Load() || atomic.LoadUint64(tail) > s }) || stop.Load() {
							stop.Store(true)
							return
						}
						for i := range n {
							if buf[i] != stepByte(ch, s, i) {
								t.Errorf("%s: byte %d is %d, want %d", what, i, buf[i], stepByte(ch, s, i))
								stop.Store(true)
								return
							}
						}
					} else {
						f := llFlag(s)
						for l := range (n + 7) / 8 {
							if !spin(t, fmt.Sprintf("%s: line %d", what, l), func() bool { return stop.Load() || llReady(buf[16*l:], f) }) || stop.Load() {
								stop.Store(true)
								return
							}
							if buf[16*l] != stepByte(ch, s, 2*l) || buf[16*l+8] != stepByte(ch, s, 2*l+1) {
								t.Errorf("%s: line %d differs", what, l)
								stop.Store(true)
								return
							}
						}
					}
					atomic.StoreUint64(head, s+1)
				}
				s++
			}
		}
	}
}

// TestNETP2PPattern runs the fake hosts' SendRecv sequence (LL of one
// line, LL of one near-full step, SIMPLE of several steps with a 12-byte
// last one, twice) in both directions between every pair of a ring, on
// two channels, as the h2r1 run that hung did.
func TestNETP2PPattern(t *testing.T) {
	for _, tc := range []struct{ ranks, nch, threads, socks int }{{2, 2, 1, 1}, {2, 2, 2, 2}, {3, 2, 2, 2}} {
		t.Run(fmt.Sprintf("%dranks_%dch_%dx%dsockets", tc.ranks, tc.nch, tc.threads, tc.socks), func(t *testing.T) {
			sets, mems := connectNETSizes(t, loNet(t, tc.threads, tc.socks), tc.ranks, tc.nch, p2pSizes,
				func(r int, err error) { t.Errorf("rank %d: proxy error: %v", r, err) })
			var stop atomic.Bool
			var wg sync.WaitGroup
			for r := range tc.ranks {
				next, prev := (r+1)%tc.ranks, (r+tc.ranks-1)%tc.ranks
				for ch := range tc.nch {
					wg.Go(func() { p2pKernel(t, mems[r], sets[r].Send[Key{ch, next}], p2pSizes, ch, true, p2pSteps, 3, &stop) })
					wg.Go(func() { p2pKernel(t, mems[r], sets[r].Recv[Key{ch, prev}], p2pSizes, ch, false, p2pSteps, 3, &stop) })
				}
			}
			wg.Wait()
			for r := range tc.ranks {
				require.NoError(t, sets[r].Close())
			}
		})
	}
}
