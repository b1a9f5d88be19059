package ncclgo

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestGPUOneRankOps runs every collective and reduction op of a one-rank
// communicator, in and out of place, with the C ABI's untracked copies and
// the Go API's tracked ones, and checks the result bit for bit: Sum, Prod,
// Min, Max and an integer Avg are the input, a floating-point Avg its
// input times 1, a PreMulSum by 2 twice it (a kernel, on one rank too).
func TestGPUOneRankOps(t *testing.T) {
	gpuOrSkip(t)
	const count = 1000
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(i%97-48) * 1.25
	}
	in[0] = float32(math.Copysign(0, -1))
	for _, untracked := range []bool{true, false} {
		envs := setup(t, []int{0}, &Options{UntrackedOneRankCopies: untracked})
		e := envs[0]
		pre, err := e.c.NewPreMulSum(2.0, Float32)
		require.NoError(t, err)
		send, recv := e.alloc(t, 4*count), e.alloc(t, 4*count)
		type opCase struct {
			name  string
			call  func(send, recv cuda.DevicePtr) error
			scale float32 // the result is the input times scale
		}
		ar := func(dt DataType, op RedOp) func(send, recv cuda.DevicePtr) error {
			return func(s, r cuda.DevicePtr) error { return e.c.AllReduce(s, r, count, dt, op, e.s) }
		}
		cases := []opCase{
			{"AllReduce Sum", ar(Float32, Sum), 1},
			{"AllReduce Prod", ar(Float32, Prod), 1},
			{"AllReduce Min", ar(Float32, Min), 1},
			{"AllReduce Max", ar(Float32, Max), 1},
			{"AllReduce Min Int32", ar(Int32, Min), 1},
			{"AllReduce Avg Int32", ar(Int32, Avg), 1},
			{"AllReduce Avg", ar(Float32, Avg), 1},
			{"AllReduce PreMulSum", ar(Float32, pre), 2},
			{"Reduce", func(s, r cuda.DevicePtr) error { return e.c.Reduce(s, r, count, Float32, Sum, 0, e.s) }, 1},
			{"ReduceScatter", func(s, r cuda.DevicePtr) error { return e.c.ReduceScatter(s, r, count, Float32, Max, e.s) }, 1},
			{"AllGather", func(s, r cuda.DevicePtr) error { return e.c.AllGather(s, r, count, Float32, e.s) }, 1},
			{"Broadcast", func(s, r cuda.DevicePtr) error { return e.c.Broadcast(s, r, count, Float32, 0, e.s) }, 1},
		}
		for _, c := range cases {
			for _, inPlace := range []bool{false, true} {
				what := fmt.Sprintf("%s (in place %v, untracked %v)", c.name, inPlace, untracked)
				dst := recv
				if inPlace {
					dst = send
				}
				e.put(t, send, in)
				if !inPlace {
					require.NoError(t, e.ctx.MemsetD8(recv, 0xff, 4*count))
				}
				require.NoError(t, c.call(send, dst), what)
				require.NoError(t, e.s.Synchronize(), what)
				require.NoError(t, e.c.Err(), what)
				got := e.get(t, dst, count)
				for i := range in {
					want := in[i] * c.scale
					if g := math.Float32bits(got[i]); g != math.Float32bits(want) {
						t.Fatalf("%s: element %d: bits %#x, want %#x (%v)", what, i, g, math.Float32bits(want), want)
					}
				}
			}
		}
	}
}
