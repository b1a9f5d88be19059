package ncclgo

import (
	"context"
	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"strings"
	"testing"
)

// TestGPUDiagConnections: after an AllReduce completes, every connection
// of a 3-rank communicator is listed and the sender's and receiver's
// steps agree on each (what a hang's dump is read against).
func TestGPUDiagConnections(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0, 0}, nil)
	for _, e := range envs {
		buf := e.alloc(t, 4096)
		require.NoError(t, e.c.AllReduce(buf, buf, 1024, Float32, Sum, e.s))
	}
	comms := make([]any, len(envs))
	ctx, cancel := context.WithTimeout(context.Background(), groupWait())
	defer cancel()
	for r, e := range envs {
		if err := e.c.Wait(ctx); err != nil {
			for _, e := range envs {
				e.c.Abort()
			}
			t.Fatalf("rank %d: %v", r, err)
		}
		comms[r] = e.c.e
	}
	conns, err := diag.Connections(envs[0].c.e)
	require.NoError(t, err)
	require.NotEmpty(t, conns)
	for _, c := range conns {
		require.GreaterOrEqual(t, c.Step, int64(0), "%+v: the step counter reads", c)
	}
	dump := diag.Dump(comms)
	t.Logf("connections:\n%s", dump)
	assert.NotContains(t, dump, "steps differ")
	assert.Contains(t, dump, "ch00 0->")
	assert.Equal(t, len(strings.Split(dump, "\n")), func() int {
		n := 0
		for _, e := range envs {
			cs, err := diag.Connections(e.c.e)
			require.NoError(t, err)
			for _, c := range cs {
				if c.Send {
					n++
				}
			}
		}
		return n
	}(), "one line per sending side")
}
