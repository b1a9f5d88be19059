package enqueue

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lookupOne is a FuncLookup that puts every function in kernel 0.
func lookupOne(f kspace.Func) (int, int, error) { return 7, 0, nil }

// allReducePlan is rank's plan of one AllReduce of n bytes over nc channels
// of nRanks ranks.
func allReducePlan(t *testing.T, rank, nRanks, nc int, n uint64) Plan {
	t.Helper()
	c := Comm{Rank: rank, NRanks: nRanks, NChannels: 64, P2PChannelsPerPeer: 2}
	p, err := Build(c, []Task{{Coll: kspace.AllReduce, Send: 0x1000 + uint64(rank)<<20, Recv: 0x2000 + uint64(rank)<<20,
		Bytes: n, Type: kspace.F32, Op: kspace.Sum}}, ring(nc), lookupOne)
	require.NoError(t, err)
	require.Len(t, p.Launches, 1)
	return p
}

// decodeMulti does what the kernel's prologue (ngKernelMain) does with the
// arguments of a multi-rank launch, from their bytes as the kernel gets
// them: for each block, the device communicator, the channel and the
// works it runs.
func decodeMulti(t *testing.T, raw []byte, nBlocks int) (comms []uint64, chans []int, works [][]generated.DevWork) {
	t.Helper()
	var a generated.KernelArgs
	full := make([]byte, KernelArgsSize) // what lies past the passed bytes is never read
	copy(full, raw)
	require.NoError(t, binary.Read(bytes.NewReader(full), binary.LittleEndian, &a))
	require.NotZero(t, a.NParts)
	require.Zero(t, a.WorkBuf)
	// The table follows the works: its bytes start at works[nWork].
	off := argsHeaderSize + int(a.NWork)*64
	require.LessOrEqual(t, off+192, len(raw), "the table lies inside the passed arguments")
	var tab generated.LaunchParts
	require.NoError(t, binary.Read(bytes.NewReader(raw[off:off+192]), binary.LittleEndian, &tab))
	for b := range nBlocks {
		m := a.ChannelMask
		for range b {
			m &= m - 1
		}
		require.NotZero(t, m, "block %d has a slot", b)
		v := bits.TrailingZeros64(m)
		e := tab.Chans[v]
		require.Less(t, int(e>>6), int(a.NParts))
		comms = append(comms, tab.Comms[e>>6])
		chans = append(chans, int(e&63))
		works = append(works, append([]generated.DevWork(nil), a.Works[a.ChanWorkStart[v]:a.ChanWorkStart[v+1]]...))
	}
	return comms, chans, works
}

func TestMultiLaunchArgs(t *testing.T) {
	const nRanks = 4
	var parts []Part
	plans := make([]Plan, nRanks)
	for r := range nRanks {
		plans[r] = allReducePlan(t, r, nRanks, 2+r%2, 8<<10) // 2 or 3 channels each
		parts = append(parts, Part{Comm: 0xc0000 + uint64(r)<<8, Launch: &plans[r].Launches[0]})
	}
	require.NoError(t, CheckMulti(parts))
	a := new(generated.KernelArgs)
	// Leftovers of an earlier launch must not leak into this one.
	plans[0].Launches[0].PutArgs(a, 0xdead, 0)
	a.ChanWorkStart[63] = 99
	size, nBlocks := PutMultiArgs(a, parts)
	assert.Equal(t, 10, nBlocks)
	assert.Equal(t, uint32(nRanks), a.NParts)
	assert.Zero(t, size%16)
	comms, chans, works := decodeMulti(t, argBytes(a, size), nBlocks)
	// Every block is one rank's channel, in part then channel order, and
	// runs exactly that channel's works of that rank's plan.
	b := 0
	for r, p := range parts {
		l := p.Launch
		for m := l.ChannelMask; m != 0; m &= m - 1 {
			c := bits.TrailingZeros64(m)
			assert.Equal(t, p.Comm, comms[b], "block %d's comm", b)
			assert.Equal(t, c, chans[b], "block %d's channel", b)
			assert.Equal(t, l.Works[l.ChanWorkStart[c]:l.ChanWorkStart[c+1]], works[b], "block %d (rank %d channel %d) works", b, r, c)
			b++
		}
	}
	assert.Equal(t, nBlocks, b)
	assert.Equal(t, uint16(a.NWork), a.ChanWorkStart[generated.MaxChannels], "slots past the last have no works")
}

func TestMultiLaunchFull(t *testing.T) {
	// 8 ranks × 7 channels: 56 slots, as many as fit with one work each
	// (MaxMultiWorks).
	var parts []Part
	for r := range 8 {
		p := allReducePlan(t, r, 8, 7, 1<<20)
		parts = append(parts, Part{Comm: uint64(r + 1), Launch: &p.Launches[0]})
	}
	require.NoError(t, CheckMulti(parts))
	a := new(generated.KernelArgs)
	size, nBlocks := PutMultiArgs(a, parts)
	require.Equal(t, 56, nBlocks)
	assert.Equal(t, uint64(1)<<56-1, a.ChannelMask)
	assert.Equal(t, argsHeaderSize+(56+3)*64, size, "the header, 56 works and the table")
	comms, chans, _ := decodeMulti(t, argBytes(a, size), nBlocks)
	assert.Equal(t, uint64(8), comms[55])
	assert.Equal(t, 6, chans[55])
}

func TestCheckMulti(t *testing.T) {
	part := func(r, nc int) Part {
		p := allReducePlan(t, r, 8, nc, 1<<20)
		return Part{Comm: uint64(r + 1), Launch: &p.Launches[0]}
	}
	two := []Part{part(0, 4), part(1, 4)}
	require.NoError(t, CheckMulti(two))

	assert.ErrorContains(t, CheckMulti(two[:1]), "1 ranks: want 2..8")
	var nine []Part
	for r := range 9 {
		nine = append(nine, part(r%8, 1))
	}
	assert.ErrorContains(t, CheckMulti(nine), "9 ranks: want 2..8")

	wide := []Part{part(0, 40), part(1, 40)}
	assert.ErrorContains(t, CheckMulti(wide), "80 blocks in all, want at most 64")

	other := part(1, 4)
	l := *other.Launch
	l.Kernel = 3
	assert.ErrorContains(t, CheckMulti([]Part{two[0], {Comm: 2, Launch: &l}}), "part 1 runs")
	l = *other.Launch
	l.NThreads = 256
	assert.ErrorContains(t, CheckMulti([]Part{two[0], {Comm: 2, Launch: &l}}), "with 256 threads")

	// Works that do not fit inline, or do not leave room for the table.
	many := make([]generated.DevWork, generated.WorkInlineMax+1)
	l = *other.Launch
	l.Works = many
	assert.ErrorContains(t, CheckMulti([]Part{two[0], {Comm: 2, Launch: &l}}), "more than fit inline")
	l.Works = many[:MaxMultiWorks]
	assert.ErrorContains(t, CheckMulti([]Part{two[0], {Comm: 2, Launch: &l}}), "works in all, want at most 58")
}
