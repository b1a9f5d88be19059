package enqueue

import (
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sizes past 32 bits: 2^31 (and 2^31+3) f32 elements, 8 GiB per rank. The
// work descriptors must carry them exactly in 64 bits, in the unit the
// device expects (bytes for Broadcast/AllGather, elements otherwise), and
// the channels must still cover the buffer with aligned boundaries.
func TestEightGiBCollectives(t *testing.T) {
	const n31 = uint64(1) << 31
	cases := []struct {
		coll  kspace.Coll
		ty    kspace.Type
		count uint64
		units uint64 // expected DevWork.Count
		unit  uint64 // bytes per unit
	}{
		{kspace.AllReduce, kspace.F32, n31, n31, 4},
		{kspace.AllReduce, kspace.F32, n31 + 3, n31 + 3, 4},
		{kspace.AllReduce, kspace.F64, n31, n31, 8}, // 16 GiB
		{kspace.Reduce, kspace.F32, n31, n31, 4},
		{kspace.ReduceScatter, kspace.F32, n31, n31, 4}, // per rank: send is nRanks × 8 GiB
		{kspace.AllGather, kspace.F32, n31, n31 * 4, 1}, // 8 GiB per rank, in bytes
		{kspace.AllGather, kspace.F16, n31*2 + 1, (n31*2 + 1) * 2, 1},
		{kspace.Broadcast, kspace.F32, n31, n31 * 4, 1},
		{kspace.Broadcast, kspace.U8, n31*4 + 5, n31*4 + 5, 1},
	}
	for _, nRanks := range []int{2, 8} {
		comm := Comm{Rank: nRanks - 1, NRanks: nRanks, NChannels: 32, P2PChannelsPerPeer: 2}
		for _, nc := range []int{1, 7, 32} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%dranks/%dch/%s/%s/%d", nRanks, nc, tc.coll, tc.ty, tc.count), func(t *testing.T) {
					const send, recv = 0x7f0000000000, 0x7e0000000000
					task := Task{Coll: tc.coll, Send: send, Recv: recv, Bytes: tc.count * uint64(tc.ty.Size()), Type: tc.ty, Op: kspace.Sum, Root: nRanks - 1}
					p, err := Build(comm, []Task{task}, ring(nc), nil)
					require.NoError(t, err)
					require.Len(t, p.Launches, 1)
					l := p.Launches[0]
					checkCover(t, l, tc.units, max(Granule/tc.unit, 1), nc)
					wantBytes := tc.count * uint64(tc.ty.Size())
					if tc.coll == kspace.AllGather || tc.coll == kspace.ReduceScatter {
						wantBytes *= uint64(nRanks)
					}
					require.Len(t, p.Decisions, 1)
					assert.EqualValues(t, wantBytes, p.Decisions[0].Bytes)
					for _, w := range l.Works {
						assert.EqualValues(t, send, w.Sendbuff)
						assert.EqualValues(t, recv, w.Recvbuff)
						assert.EqualValues(t, nRanks-1, w.Root)
						assert.EqualValues(t, -1, w.SendPeer)
						assert.EqualValues(t, -1, w.RecvPeer)
						// The device adds chanOffset+chanCount units to the base.
						assert.LessOrEqual(t, w.ChanOffset+w.ChanCount, tc.units)
					}
				})
			}
		}
	}
}

// An 8 GiB send and receive between two ranks: the parts cover the message
// exactly in bytes, at the right addresses, and both sides agree on them.
func TestEightGiBSendRecv(t *testing.T) {
	const bytes = uint64(1) << 33
	const base0, base1 = 0x7f0000000000, 0x7e0000000000
	for _, perPeer := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(perPeer), func(t *testing.T) {
			var plans [2]Plan
			for r := range 2 {
				c := Comm{Rank: r, NRanks: 2, NChannels: 8, P2PChannelsPerPeer: perPeer}
				tasks := []Task{
					{Coll: kspace.SendRecv, Send: base0 + uint64(r), Bytes: bytes, Type: kspace.U8, Peer: 1 - r, IsSend: true},
					{Coll: kspace.SendRecv, Recv: base1 + uint64(r), Bytes: bytes, Type: kspace.U8, Peer: 1 - r},
				}
				p, err := Build(c, tasks, ring(8), nil)
				require.NoError(t, err)
				require.Len(t, p.Launches, 1)
				plans[r] = p
				var sent, recvd uint64
				for _, w := range p.Launches[0].Works {
					assert.EqualValues(t, base0+uint64(r)+sent, w.Sendbuff)
					assert.EqualValues(t, base1+uint64(r)+recvd, w.Recvbuff)
					sent += w.Count
					recvd += w.ChanCount
					assert.Zero(t, w.Count%P2PGranule)
				}
				assert.Equal(t, bytes, sent)
				assert.Equal(t, bytes, recvd)
				assert.Len(t, p.Launches[0].Works, perPeer)
			}
			// Rank 0's send part j is rank 1's receive part j, on the same channel.
			w0, w1 := plans[0].Launches[0].Works, plans[1].Launches[0].Works
			require.Equal(t, len(w0), len(w1))
			for j := range w0 {
				assert.Equal(t, w0[j].Count, w1[j].ChanCount)
				assert.Equal(t, w1[j].Count, w0[j].ChanCount)
			}
			assert.Equal(t, plans[0].Launches[0].ChanWorkStart, plans[1].Launches[0].ChanWorkStart)
			assert.NoError(t, simulate(plans[:]))
		})
	}
}

// The real tuner at 8 GiB on 8 ranks: its choice fits the launch limits
// (block size, channels, nWarps) and the split is exact.
func TestEightGiBWithTuner(t *testing.T) {
	const n31 = uint64(1) << 31
	tn, err := tune.New(tune.Topology{NRanks: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, config.Default(), nil)
	require.NoError(t, err)
	c := Comm{Rank: 3, NRanks: 8, NChannels: tn.MaxChannels(), P2PChannelsPerPeer: 2}
	for _, tc := range []struct {
		coll  kspace.Coll
		units uint64
		unit  uint64
	}{
		{kspace.AllReduce, n31, 4},
		{kspace.ReduceScatter, n31, 4},
		{kspace.AllGather, n31 * 4, 1},
		{kspace.Broadcast, n31 * 4, 1},
		{kspace.Reduce, n31, 4},
	} {
		t.Run(tc.coll.String(), func(t *testing.T) {
			p, err := Build(c, []Task{{Coll: tc.coll, Send: 1 << 40, Recv: 1 << 41, Bytes: n31 * 4, Type: kspace.F32, Op: kspace.Sum}}, tn, nil)
			require.NoError(t, err)
			require.Len(t, p.Launches, 1)
			l := p.Launches[0]
			checkCover(t, l, tc.units, Granule/tc.unit, l.NBlocks())
			assert.LessOrEqual(t, l.NThreads, generated.MaxNthreads)
			assert.GreaterOrEqual(t, l.NThreads, MinBlockThreads)
			assert.LessOrEqual(t, l.NBlocks(), c.NChannels)
		})
	}
}
