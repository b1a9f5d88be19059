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
