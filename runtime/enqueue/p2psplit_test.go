package enqueue

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// A large send between two ranks of one GPU spreads over every channel the
// communicator gives a peer, in equal parts aligned to P2PGranule, and the
// receive splits alike so that each channel's parts pair up.
func TestP2PLargeSendUsesEveryPeerChannel(t *testing.T) {
	tn, err := tune.New(tune.Topology{NRanks: 2, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, config.Default(), nil)
	require.NoError(t, err)
	nch := tn.MaxChannels()
	require.Equal(t, 32, nch)
	for _, perPeer := range []int{2, 8, 32} {
		for _, n := range []uint64{1 << 20, 1 << 26, 1 << 30, 1<<30 + 4096} {
			t.Run(fmt.Sprintf("perPeer=%d/bytes=%d", perPeer, n), func(t *testing.T) {
				plans := make([]Plan, 2)
				for r := range 2 {
					c := Comm{Rank: r, NRanks: 2, NChannels: nch, P2PChannelsPerPeer: perPeer}
					tasks := []Task{
						{Coll: kspace.SendRecv, IsSend: true, Peer: 1 - r, Send: 1 << 40, Bytes: n, Type: kspace.U8},
						{Coll: kspace.SendRecv, Peer: 1 - r, Recv: 2 << 40, Bytes: n, Type: kspace.U8},
					}
					p, err := Build(c, tasks, tn, nil)
					require.NoError(t, err)
					plans[r] = p
					require.Len(t, p.Launches, 1)
					l := p.Launches[0]
					assert.Equal(t, perPeer, l.NBlocks(), "a %d-byte send spreads over the peer's %d channels", n, perPeer)
					var sent, recvd uint64
					var off uint64
					for ch := range perPeer {
						ws := l.Works[l.ChanWorkStart[ch]:l.ChanWorkStart[ch+1]]
						require.Len(t, ws, 1, "channel %d", ch)
						w := ws[0]
						assert.Equal(t, uint64(1<<40)+off, w.Sendbuff, "channel %d sends the next part", ch)
						assert.Equal(t, w.Count, w.ChanCount, "channel %d: send and receive parts match", ch)
						if ch < perPeer-1 {
							assert.Zero(t, w.Count%P2PGranule, "channel %d: part of %d bytes", ch, w.Count)
						}
						off += w.Count
						sent += w.Count
						recvd += w.ChanCount
					}
					assert.Equal(t, n, sent)
					assert.Equal(t, n, recvd)
					for _, d := range p.Decisions {
						assert.Equal(t, perPeer, d.NChannels)
					}
				}
				require.NoError(t, simulate(plans))
			})
		}
	}
}

// Small messages stay on few channels whatever the peer may use: the
// tuner's per-thread threshold decides.
func TestP2PSmallSendFewChannels(t *testing.T) {
	tn, err := tune.New(tune.Topology{NRanks: 2, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 32}, config.Default(), nil)
	require.NoError(t, err)
	c := Comm{Rank: 0, NRanks: 2, NChannels: 32, P2PChannelsPerPeer: 32}
	p, err := Build(c, []Task{{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Send: 1 << 40, Bytes: 4096, Type: kspace.U8}}, tn, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, p.Launches[0].NBlocks())
}
