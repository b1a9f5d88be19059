package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// onePassParts returns the parts of a multi-rank launch of nParts ranks
// of a communicator of nRanks, each an AllReduce of n bytes on nc
// channels; change edits rank r's plan first.
func onePassParts(t *testing.T, nParts, nRanks, nc int, n uint64, change func(r int, p *Plan)) []Part {
	t.Helper()
	parts := make([]Part, nParts)
	for r := range nParts {
		p := allReducePlan(t, r, nRanks, nc, n)
		if change != nil {
			change(r, &p)
		}
		parts[r] = Part{Comm: 0xc0000 + uint64(r)<<8, Launch: &p.Launches[0], NRanks: nRanks}
	}
	return parts
}

func TestOnePass(t *testing.T) {
	for _, n := range []int{2, 8} {
		assert.True(t, OnePass(onePassParts(t, n, n, 1, 8, nil)), "%d ranks, 8 B", n)
		assert.True(t, OnePass(onePassParts(t, n, n, 1, OnePassMaxBytes, nil)), "%d ranks, the largest", n)
	}
	for name, parts := range map[string][]Part{
		"not every rank": onePassParts(t, 2, 4, 1, 8, nil),
		"two channels":   onePassParts(t, 2, 2, 2, 1024, nil),
		"too large":      onePassParts(t, 2, 2, 1, OnePassMaxBytes+4, nil),
		"counts differ": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) {
			p.Launches[0].Works[0].Count += uint64(r)
			p.Launches[0].Works[0].ChanCount += uint64(r)
		}),
		"operation args differ": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { p.Launches[0].Works[0].RedOpArg = uint64(r) }),
		"functions differ":      onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { p.Launches[0].Works[0].FuncId += uint16(r) }),
		"two works":             onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { l := &p.Launches[0]; l.Works = append(l.Works, l.Works[0]) }),
		"no buffer":             onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { p.Launches[0].Works[0].Sendbuff = 0 }),
		"one part":              onePassParts(t, 2, 2, 1, 8, nil)[:1],
	} {
		assert.False(t, OnePass(parts), name)
	}

	// The launcher sets the flag on the arguments where OnePassAllReduce
	// is on and OnePass accepts the parts, keeping the early start's.
	parts := onePassParts(t, 8, 8, 1, 8, nil)
	require.NoError(t, CheckMulti(parts))
	for _, on := range []bool{false, true} {
		l := &Launcher{OnePassAllReduce: on}
		a := new(generated.KernelArgs)
		PutMultiArgs(a, parts)
		a.Flags |= generated.ArgsTriggerEarly
		l.setOnePass(a, parts)
		assert.Equal(t, on, a.Flags&generated.ArgsOnePass != 0, "on=%v", on)
		assert.Equal(t, on, a.Flags&generated.ArgsOnePassEntry != 0, "on=%v", on)
		assert.NotZero(t, a.Flags&generated.ArgsTriggerEarly)
		// The kernel reads rank q's buffers from works[q].
		for q := range parts {
			assert.Equal(t, parts[q].Launch.Works[0].Sendbuff, a.Works[q].Sendbuff)
			assert.Equal(t, parts[q].Launch.Works[0].Recvbuff, a.Works[q].Recvbuff)
		}
	}
	// The entry gets the works' reduction op.
	for op := kspace.RedOp(0); op < kspace.NumRedOps; op++ {
		parts := onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { p.Launches[0].Func.RedOp = op })
		l := &Launcher{OnePassAllReduce: true}
		a := new(generated.KernelArgs)
		PutMultiArgs(a, parts)
		l.setOnePass(a, parts)
		assert.Equal(t, uint16(op), a.Flags>>generated.ArgsRedopShift&15, "%v", op)
		assert.NotZero(t, a.Flags&generated.ArgsOnePassEntry, "%v", op)
	}
	l := &Launcher{OnePassAllReduce: true}
	a := new(generated.KernelArgs)
	notAll := onePassParts(t, 2, 4, 1, 8, nil)
	PutMultiArgs(a, notAll)
	l.setOnePass(a, notAll)
	assert.Zero(t, a.Flags&generated.ArgsOnePass, "not every rank")
}

// TestOnePassEntryKernels checks what generated.ArgsOnePassEntry relies
// on: every AllReduce function that onePassEntry accepts runs on a kernel
// of its own collective and type (whose one-pass entry knows every op of
// that type) or on the generic kernel (which has none), and the op fits
// its four bits above the other flags.
func TestOnePassEntryKernels(t *testing.T) {
	require.LessOrEqual(t, int(kspace.NumRedOps), 16)
	other := uint16(generated.ArgsTriggerEarly | generated.ArgsOnePass | generated.ArgsOnePassEntry)
	assert.Zero(t, other>>generated.ArgsRedopShift, "flags below the op's bits")
	n := 0
	for _, f := range generated.Funcs {
		if f.Func.Coll != kspace.AllReduce || f.Func.Kind != kspace.Ordinary || !onePassEntry(f.Func) {
			continue
		}
		k := generated.Kernels[f.Kernel].Func
		if k.Kind == kspace.Generic {
			continue
		}
		n++
		assert.Equal(t, kspace.AllReduce, k.Coll, "%v runs on %v", f.Func, k)
		assert.Equal(t, f.Func.Type, k.Type, "%v runs on %v", f.Func, k)
	}
	assert.NotZero(t, n, "no AllReduce function on a kernel of its own")
	assert.False(t, onePassEntry(kspace.Func{Coll: kspace.AllReduce, RedOp: kspace.MinMax, Type: kspace.I32, Algo: kspace.NVLS, Proto: kspace.Simple}))
}

// TestOnePassWide: a multi-rank launch of every rank's one AllReduce runs
// through the one-pass entry on a grid sized to the call, whatever
// channels the tuner split it into; putMulti writes such arguments, each
// rank's whole call in works[rank].
func TestOnePassWide(t *testing.T) {
	for _, tc := range []struct {
		ranks, nc int
		bytes     uint64
		want      int
	}{
		{2, 1, 8, 2},
		{8, 1, 8, 8},
		{2, 4, 32 << 10, 8},
		{2, 32, 256 << 10, 64},
		{8, 4, 256 << 10, 64},
		{2, 1, 12 << 10, 3},
		{8, 1, OnePassMaxBytes, 64},
	} {
		parts := onePassParts(t, tc.ranks, tc.ranks, tc.nc, tc.bytes, nil)
		k, ok := onePassWide(parts)
		require.True(t, ok, "%+v", tc)
		assert.Equal(t, tc.want, k, "%+v", tc)
		if CheckMulti(parts) != nil {
			continue // no multi-rank launch: planMerges leaves the ranks apart
		}
		l := &Launcher{OnePassAllReduce: true}
		a := new(generated.KernelArgs)
		size, nBlocks := l.putMulti(a, parts, false)
		assert.Equal(t, tc.want, nBlocks, "%+v", tc)
		assert.Equal(t, uint64(1)<<tc.want-1|boolMask(tc.want == 64), a.ChannelMask, "%+v: a slot per block", tc)
		assert.Equal(t, uint32(tc.ranks), a.NParts)
		assert.NotZero(t, a.Flags&generated.ArgsOnePassEntry)
		assert.Equal(t, uint16(kspace.Sum), a.Flags>>generated.ArgsRedopShift&15)
		assert.LessOrEqual(t, size, KernelArgsSize)
		for q := range parts {
			w := a.Works[q]
			src := parts[q].Launch.Works[0]
			assert.Equal(t, src.Sendbuff, w.Sendbuff, "%+v rank %d", tc, q)
			assert.Equal(t, src.Recvbuff, w.Recvbuff, "%+v rank %d", tc, q)
			assert.Equal(t, src.Count, w.Count)
			assert.Equal(t, uint64(0), w.ChanOffset, "the whole call")
			assert.Equal(t, src.Count, w.ChanCount, "the whole call")
		}
	}
	for name, parts := range map[string][]Part{
		"not every rank": onePassParts(t, 2, 4, 1, 8, nil),
		"too large":      onePassParts(t, 2, 2, 1, OnePassMaxBytes+4, nil),
		"signed type": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) {
			p.Launches[0].Func.Type = kspace.I32
		}),
		"SumPostDiv on floats": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) {
			p.Launches[0].Func.RedOp = kspace.SumPostDiv
		}),
		"buffers in windows": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) {
			p.Launches[0].Works[0].Flags |= generated.WorkDirectWin
		}),
		"a channel's buffer differs": onePassParts(t, 2, 2, 4, 32<<10, func(r int, p *Plan) {
			p.Launches[0].Works[2].Sendbuff += 64
		}),
		"shares do not cover the call": onePassParts(t, 2, 2, 4, 32<<10, func(r int, p *Plan) {
			p.Launches[0].Works[3].ChanCount--
		}),
		"two calls": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) { l := &p.Launches[0]; l.Works = append(l.Works, l.Works[0]) }),
		"functions differ": onePassParts(t, 2, 2, 1, 8, func(r int, p *Plan) {
			if r == 1 {
				p.Launches[0].Func.Proto = (p.Launches[0].Func.Proto + 1) % kspace.NumProtos
			}
		}),
	} {
		_, ok := onePassWide(parts)
		assert.False(t, ok, name)
	}
	// Off, putMulti writes PutMultiArgs' launch: a block per channel.
	parts := onePassParts(t, 2, 2, 4, 32<<10, nil)
	a := new(generated.KernelArgs)
	_, nBlocks := (&Launcher{}).putMulti(a, parts, false)
	assert.Equal(t, 8, nBlocks)
	assert.Zero(t, a.Flags&generated.ArgsOnePass)
}

func boolMask(all bool) uint64 {
	if all {
		return ^uint64(0)
	}
	return 0
}
