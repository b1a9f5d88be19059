package enqueue

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// directOutcome is what simulateDirect saw.
type directOutcome struct {
	aborted  []bool // the rank saw a size mismatch (and set its abort flag)
	stuck    []bool // the rank has works left that no abort explains: a hang
	overflow error  // a copy landed outside the receiver's message
}

// simulateDirect runs plans as devicesrc/sendrecv.h's direct mode does: a
// part's send meets the receiver's part that is current on the same
// channel; the sender compares the receiver's part and message sizes
// (ptrExchange [2], [3]) with its own, the receiver the sender's message
// size ([3], ~its own when only the parts differ). On a mismatch nothing is
// copied and both ranks abort: their remaining works stop. recvMsg maps a
// receive buffer's start to its message's bytes (to check copies stay
// inside).
func simulateDirect(plans []Plan, recvMsg func(rank int, buf uint64) (start, bytes uint64)) directOutcome {
	n := len(plans)
	out := directOutcome{aborted: make([]bool, n), stuck: make([]bool, n)}
	type state struct {
		works              []generated.DevWork
		pos                int
		sendDone, recvDone bool
	}
	st := make([][generated.MaxChannels]*state, n)
	for r, p := range plans {
		for _, l := range p.Launches {
			for ch := range generated.MaxChannels {
				if s, e := l.ChanWorkStart[ch], l.ChanWorkStart[ch+1]; s != e {
					st[r][ch] = &state{works: l.Works[s:e]}
				}
			}
		}
	}
	cur := func(r, ch int) *generated.DevWork {
		s := st[r][ch]
		if out.aborted[r] || s == nil || s.pos >= len(s.works) {
			return nil
		}
		return &s.works[s.pos]
	}
	for progress := true; progress; {
		progress = false
		for r := range n {
			for ch := range generated.MaxChannels {
				w := cur(r, ch)
				if w == nil {
					continue
				}
				s := st[r][ch]
				s.sendDone = s.sendDone || w.SendPeer < 0
				s.recvDone = s.recvDone || w.RecvPeer < 0
				if !s.sendDone {
					p := int(w.SendPeer)
					if pw := cur(p, ch); pw != nil && int(pw.RecvPeer) == r && !st[p][ch].recvDone {
						s.sendDone, st[p][ch].recvDone = true, true
						progress = true
						if pw.ChanCount != w.Count || pw.RedOpArg != w.ChanOffset {
							out.aborted[r], out.aborted[p] = true, true
							continue
						}
						start, bytes := recvMsg(p, pw.Recvbuff)
						if pw.Recvbuff+w.Count > start+bytes && out.overflow == nil {
							out.overflow = fmt.Errorf("rank %d channel %d: %d bytes at %#x overflow rank %d's receive [%#x, %#x)",
								r, ch, w.Count, pw.Recvbuff, p, start, start+bytes)
						}
					}
				}
				if s.sendDone && s.recvDone {
					s.pos++
					s.sendDone, s.recvDone = false, false
					progress = true
				}
			}
		}
	}
	// A rank still waiting on an aborted rank, or on a rank that itself
	// waits so, is the peer-failure case (Wait's context or Abort ends it,
	// as after any failed peer); waiting on anything else is a hang.
	waits := make([][]int, n)
	for r := range n {
		for ch := range generated.MaxChannels {
			if w := cur(r, ch); w != nil {
				s := st[r][ch]
				if w.SendPeer >= 0 && !s.sendDone {
					waits[r] = append(waits[r], int(w.SendPeer))
				}
				if w.RecvPeer >= 0 && !s.recvDone {
					waits[r] = append(waits[r], int(w.RecvPeer))
				}
			}
		}
	}
	casualty := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r := range n {
			for _, p := range waits[r] {
				if !casualty[r] && (out.aborted[p] || casualty[p]) {
					casualty[r], changed = true, true
				}
			}
		}
	}
	for r := range n {
		out.stuck[r] = len(waits[r]) > 0 && !casualty[r]
	}
	return out
}

// A Send and a Recv of different sizes split into different numbers of
// parts; every part carries both messages' sizes, and part 0 of both sides
// always meet, so both ranks see the mismatch and abort (no part is left
// waiting on a live rank), and nothing lands outside the receive buffer.
// Ranks 0 → 1 disagree; every other ring edge agrees.
func TestP2PSizeMismatchAbortsBothRanks(t *testing.T) {
	sizes := []uint64{0, 1, 100, 512 << 10, 1 << 20, 1 << 30}
	const msgBase, msgStride = 1 << 40, 1 << 34
	for _, n := range []int{2, 3, 4} {
		tn, err := tune.New(tune.Topology{NRanks: n, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, config.Default(), nil)
		require.NoError(t, err)
		nch := tn.MaxChannels()
		for _, perPeer := range []int{1, 2, 8, 32} {
			for _, sent := range sizes {
				for _, want := range sizes {
					if (sent == 0) != (want == 0) {
						// A zero-byte call has no work at all (planP2P drops
						// it), so its peer's parts cannot meet anything: a
						// known gap, see the report in docs/notes.
						continue
					}
					t.Run(fmt.Sprintf("n=%d/perPeer=%d/send=%d/recv=%d", n, perPeer, sent, want), func(t *testing.T) {
						plans := make([]Plan, n)
						recvBufs := make([]map[uint64]uint64, n) // start -> bytes
						for r := range n {
							to, from := (r+1)%n, (r-1+n)%n
							sb, rb := uint64(1<<30), uint64(1<<30)
							if r == 0 {
								sb = sent
							}
							if r == 1 {
								rb = want
							}
							recv := uint64(msgBase + msgStride*(2*r+1))
							recvBufs[r] = map[uint64]uint64{recv: rb}
							tasks := []Task{
								{Coll: kspace.SendRecv, IsSend: true, Peer: to, Send: msgBase + msgStride*uint64(2*r), Bytes: sb, Type: kspace.U8},
								{Coll: kspace.SendRecv, Peer: from, Recv: recv, Bytes: rb, Type: kspace.U8},
							}
							c := Comm{Rank: r, NRanks: n, NChannels: nch, P2PChannelsPerPeer: perPeer}
							p, err := Build(c, tasks, tn, nil)
							require.NoError(t, err)
							plans[r] = p
							// Every part carries its whole messages' sizes.
							for _, l := range p.Launches {
								for _, w := range l.Works {
									if w.SendPeer >= 0 {
										assert.Equal(t, sb, w.ChanOffset, "rank %d: a send part carries the Send's bytes", r)
									}
									if w.RecvPeer >= 0 {
										assert.Equal(t, rb, w.RedOpArg, "rank %d: a receive part carries the Recv's bytes", r)
									}
								}
							}
						}
						o := simulateDirect(plans, func(rank int, buf uint64) (uint64, uint64) {
							for start, b := range recvBufs[rank] {
								if buf >= start && buf < start+max(b, 1) {
									return start, b
								}
							}
							return buf, 0
						})
						require.NoError(t, o.overflow)
						for r := range n {
							assert.False(t, o.stuck[r], "rank %d waits on a live rank: a hang", r)
						}
						if sent != want {
							assert.True(t, o.aborted[0], "the sender (rank 0) sees %d vs %d", sent, want)
							assert.True(t, o.aborted[1], "the receiver (rank 1) sees %d vs %d", want, sent)
						} else {
							assert.Equal(t, make([]bool, n), o.aborted, "equal sizes run to the end")
						}
					})
				}
			}
		}
	}
}
