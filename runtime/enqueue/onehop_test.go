package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// oneHopChooser is fixedChooser whose choices ask for one hop.
type oneHopChooser struct{ fixedChooser }

func (f oneHopChooser) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, n int64) (tune.Choice, error) {
	c, err := f.fixedChooser.Choose(coll, op, ty, n)
	c.OneHop = true
	return c, err
}

// TestPlanOneHop: every work of a call whose choice asks for one hop
// carries NG_WORK_ONEHOP, and no work of another does.
func TestPlanOneHop(t *testing.T) {
	c := Comm{Rank: 0, NRanks: 2, NChannels: 4}
	lookup := func(f kspace.Func) (int, int, error) { return 3, 0, nil }
	task := Task{Coll: kspace.AllReduce, Send: 0x1000_0000, Recv: 0x2000_0000, Bytes: 64 << 10, Type: kspace.F32, Op: kspace.Sum}
	ring := fixedChooser{algo: kspace.Ring, proto: kspace.Simple, nc: 2, nt: 256}
	for _, tc := range []struct {
		name string
		ch   Chooser
		want uint8
	}{{"one hop", oneHopChooser{ring}, generated.WorkOnehop}, {"ring", ring, 0}} {
		p, err := Build(c, []Task{task}, tc.ch, lookup)
		require.NoError(t, err, tc.name)
		require.Len(t, p.Launches, 1, tc.name)
		require.Len(t, p.Launches[0].Works, 2, tc.name)
		for _, w := range p.Launches[0].Works {
			assert.Equal(t, tc.want, w.Flags&generated.WorkOnehop, tc.name)
		}
	}
}
