package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
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
		assert.NotZero(t, a.Flags&generated.ArgsTriggerEarly)
		// The kernel reads rank q's buffers from works[q].
		for q := range parts {
			assert.Equal(t, parts[q].Launch.Works[0].Sendbuff, a.Works[q].Sendbuff)
			assert.Equal(t, parts[q].Launch.Works[0].Recvbuff, a.Works[q].Recvbuff)
		}
	}
	l := &Launcher{OnePassAllReduce: true}
	a := new(generated.KernelArgs)
	notAll := onePassParts(t, 2, 4, 1, 8, nil)
	PutMultiArgs(a, notAll)
	l.setOnePass(a, notAll)
	assert.Zero(t, a.Flags&generated.ArgsOnePass, "not every rank")
}
