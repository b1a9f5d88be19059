package transport

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corruptNet hands its rank the others' connection info after edit (the
// first AllGather only: the later ones are barriers).
type corruptNet struct {
	bootstrap.Network
	edit func(all [][]byte) [][]byte
	done bool
}

func (c *corruptNet) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	all, err := c.Network.AllGather(ctx, mine)
	if err != nil || c.done {
		return all, err
	}
	c.done = true
	return c.edit(all), nil
}

// editRegions rewrites rank from's published regions.
func editRegions(t *testing.T, from int, f func(rs []wireRegion) []wireRegion) func([][]byte) [][]byte {
	return func(all [][]byte) [][]byte {
		var w wireRank
		require.NoError(t, json.Unmarshal(all[from], &w))
		w.Regions = f(w.Regions)
		b, err := json.Marshal(w)
		require.NoError(t, err)
		all[from] = b
		return all
	}
}

// TestConnectRejectsCorruptPeer: a receiver whose published connection
// info places the sender's connections outside the memory it shares, on
// channels the sender does not use, twice, or an exchange with the wrong
// number of blocks, fails the sender's Connect with an error naming that
// receiver, releasing everything.
func TestConnectRejectsCorruptPeer(t *testing.T) {
	const n, nch, victim, culprit = 3, 2, 0, 1 // rank 0 sends to rank 1
	for _, c := range []struct {
		name string
		pol  Policy
		edit func(t *testing.T) func([][]byte) [][]byte
		want string
	}{
		{"offset beyond the VMM region", Policy{}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { rs[0].Edges[1].Off = 1 << 40; return rs })
		}, "rank 1 placed rank 0's connection on channel 1 at offset 1099511627776"},
		{"offset beyond the shared memory", Policy{P2PDisable: true}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { rs[0].Edges[0].Off = ^uint64(0) - 5; return rs })
		}, "rank 1 placed rank 0's connection on channel 0 at offset"},
		{"a channel the sender does not use", Policy{}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { rs[0].Edges[1].Channel = 7; return rs })
		}, "rank 1 published a connection from rank 0 on channel 7"},
		{"a channel twice", Policy{}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { rs[0].Edges[1].Channel = 0; return rs })
		}, "rank 1 published rank 0's connection on channel 0 twice"},
		{"two regions", Policy{}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { return append(rs, rs[0]) })
		}, "rank 1 published two regions for rank 0's connections"},
		{"flags the sender does not derive", Policy{}, func(t *testing.T) func([][]byte) [][]byte {
			return editRegions(t, culprit, func(rs []wireRegion) []wireRegion { rs[0].Flags |= generated.ConnDirect; return rs })
		}, "rank 1 published flags 0x"},
		{"too many blocks", Policy{}, func(*testing.T) func([][]byte) [][]byte {
			return func(all [][]byte) [][]byte { return append(all, all[0]) }
		}, "4 blocks for 3 ranks"},
		{"too few blocks", Policy{}, func(*testing.T) func([][]byte) [][]byte {
			return func(all [][]byte) [][]byte { return all[:1] }
		}, "1 blocks for 3 ranks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fds := openFDs(t)
			peers, devs := fakeProcesses(n)
			sets, errs, _ := connectFakeVia(t, peers, devs, nch, c.pol, func(r int, nt bootstrap.Network) bootstrap.Network {
				if r == victim {
					return &corruptNet{Network: nt, edit: c.edit(t)}
				}
				return nt
			})
			for r, s := range sets {
				assert.NoError(t, s.Close(), "rank %d", r)
			}
			require.Error(t, errs[victim])
			assert.Contains(t, errs[victim].Error(), c.want)
			for r := range n {
				assert.Zero(t, devs[r].liveCount(), "rank %d released everything", r)
			}
			assert.Equal(t, fds, openFDs(t), "no descriptor left open")
		})
	}
}
