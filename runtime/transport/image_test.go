package transport

import (
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// at reads a T at offset off of b.
func at[T any](b []byte, off uint64) T { return *(*T)(unsafe.Pointer(&b[off])) }

func TestImage(t *testing.T) {
	const n, nch, me = 3, 2, 1
	rings := [][]int{{0, 1, 2}, {2, 1, 0}}
	trees := graph.Trees(n, nch)
	set := &Set{Send: map[Key]generated.ConnInfo{}, Recv: map[Key]generated.ConnInfo{}}
	for ch := range nch {
		set.Send[Key{ch, 2}] = generated.ConnInfo{Head: uint64(100 + ch), Flags: 7}
		set.Recv[Key{ch, 0}] = generated.ConnInfo{Tail: uint64(200 + ch)}
	}
	spec := ImageSpec{Rank: me, NRanks: n, NChannels: nch, Rings: rings, Trees: trees, Conns: set,
		AbortFlag: 0xa000, ErrorFlag: 0xa004, Sizes: sizes}
	img, err := BuildImage(spec)
	require.NoError(t, err)
	const base = 0x7000_0000_0000
	b := img.Relocate(base)
	require.Len(t, b, img.Size())
	require.Zero(t, img.Size()%imageAlign)

	dc := at[generated.DevComm](b, 0)
	assert.Equal(t, int32(me), dc.Rank)
	assert.Equal(t, int32(n), dc.NRanks)
	assert.Equal(t, int32(nch), dc.NChannels)
	assert.Equal(t, uint64(0xa000), dc.AbortFlag)
	assert.Equal(t, uint64(0xa004), dc.ErrorFlag)
	assert.Equal(t, [3]uint32(sizes), dc.BuffSizes)
	require.Greater(t, dc.Channels, uint64(base), "relocated")
	for ch := range nch {
		off := dc.Channels - base + uint64(ch)*uint64(unsafe.Sizeof(generated.DevChannel{}))
		dch := at[generated.DevChannel](b, off)
		assert.Equal(t, uint32(ch), dch.Id)
		prev, next, index, users := graph.RingView(rings[ch], me)
		assert.Equal(t, generated.DevRing{Prev: int32(prev), Next: int32(next), Index: int32(index), UserRanks: dch.Ring.UserRanks}, dch.Ring)
		for i, u := range users {
			assert.Equal(t, int32(u), at[int32](b, dch.Ring.UserRanks-base+uint64(4*i)), "channel %d user rank %d", ch, i)
		}
		assert.Equal(t, int32(trees[ch].Up[me]), dch.Tree.Up)
		for p := range n {
			dp := at[generated.DevPeer](b, dch.Peers-base+uint64(p)*uint64(unsafe.Sizeof(generated.DevPeer{})))
			assert.Equal(t, set.Send[Key{ch, p}], dp.Send, "channel %d peer %d", ch, p)
			assert.Equal(t, set.Recv[Key{ch, p}], dp.Recv, "channel %d peer %d", ch, p)
		}
	}
	// Relocating again at another base leaves the first result alone.
	b2 := img.Relocate(base + 0x1000)
	assert.Equal(t, dc.Channels+0x1000, at[generated.DevComm](b2, 0).Channels)
	assert.Equal(t, dc.Channels, at[generated.DevComm](b, 0).Channels)

	_, err = BuildImage(ImageSpec{Rank: 0, NRanks: n, NChannels: 3, Rings: rings, Trees: trees, Conns: set})
	assert.Error(t, err, "more channels than rings")
	_, err = BuildImage(ImageSpec{Rank: 0, NRanks: n, NChannels: 1, Rings: rings, Trees: trees})
	assert.Error(t, err, "no connections")
}

func TestImageDirect(t *testing.T) {
	const n, nch = 3, 2
	rings := [][]int{{0, 1, 2}, {2, 1, 0}}
	trees := graph.Trees(n, nch)
	set := &Set{Send: map[Key]generated.ConnInfo{}, Recv: map[Key]generated.ConnInfo{}}
	spec := ImageSpec{Rank: 2, NRanks: n, NChannels: nch, Rings: rings, Trees: trees, Conns: set, Sizes: sizes}

	// Without mailboxes DevComm.Direct stays 0 after relocation.
	img, err := BuildImage(spec)
	require.NoError(t, err)
	const base = 0x7000_0000_0000
	dc := at[generated.DevComm](img.Relocate(base), 0)
	assert.Zero(t, dc.Direct)
	assert.Zero(t, dc.DirectFlags)

	spec.Direct = []uint64{0x1000, 0x2000, 0x3000}
	spec.DirectFlags = generated.DirectSameGpu
	img, err = BuildImage(spec)
	require.NoError(t, err)
	b := img.Relocate(base)
	dc = at[generated.DevComm](b, 0)
	require.Greater(t, dc.Direct, uint64(base), "relocated")
	assert.Equal(t, uint32(generated.DirectSameGpu), dc.DirectFlags)
	for r, want := range spec.Direct {
		assert.Equal(t, want, at[uint64](b, dc.Direct-base+uint64(8*r)), "rank %d's mailboxes", r)
	}
	assert.LessOrEqual(t, dc.Direct-base+8*n, uint64(len(b)))

	assert.Zero(t, img.WindowTableOffset(), "no window table unless asked")

	// The window table follows the mailboxes, zeroed, inside the image.
	spec.DirectWindows = true
	img, err = BuildImage(spec)
	require.NoError(t, err)
	b = img.Relocate(base)
	dc = at[generated.DevComm](b, 0)
	off := img.WindowTableOffset()
	assert.Equal(t, dc.Direct-base+8*n, uint64(off), "right after the mailboxes (direct[nRanks])")
	require.LessOrEqual(t, off+8*generated.DirectMaxWindows*n, len(b))
	for i := range generated.DirectMaxWindows * n {
		require.Zero(t, at[uint64](b, uint64(off+8*i)), "entry %d", i)
	}

	spec.Direct = spec.Direct[:2]
	_, err = BuildImage(spec)
	assert.ErrorContains(t, err, "2 DIRECT mailboxes for 3 ranks")
	spec.Direct = nil
	_, err = BuildImage(spec)
	assert.ErrorContains(t, err, "window table but no DIRECT mailboxes")
}
