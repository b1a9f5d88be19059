package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testutil"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// envsOf wraps communicators (in rank order) with streams; Cleanup frees
// the buffers and streams and destroys the communicators.
func envsOf(t *testing.T, comms []*Comm) []*rankEnv {
	t.Helper()
	envs := make([]*rankEnv, len(comms))
	for i, c := range comms {
		require.Equal(t, i, c.Rank())
		envs[i] = newRankEnv(t, c)
	}
	t.Cleanup(func() {
		for _, e := range envs {
			for _, p := range e.allocs {
				_ = e.ctx.MemFree(p)
			}
			if err := e.c.Destroy(); !errors.Is(err, ErrAborted) {
				require.NoError(t, err)
			}
			_ = e.s.Destroy()
			_ = e.ctx.Release()
		}
	})
	return envs
}

// byRank picks the communicators of each group of parent ranks and orders
// them by their rank in the new communicator.
func byRank(comms []*Comm, members [][]int) [][]*Comm {
	out := make([][]*Comm, len(members))
	for g, m := range members {
		for _, r := range m {
			out[g] = append(out[g], comms[r])
		}
		slices.SortFunc(out[g], func(a, b *Comm) int { return a.Rank() - b.Rank() })
	}
	return out
}

// runSplitAllGather runs one AllGather of count float32 on every rank of
// envs (a whole communicator's or a Split child's) as one group and checks
// every rank's result.
func runSplitAllGather(t *testing.T, envs []*rankEnv, count int) {
	n := len(envs)
	send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
	want := make([]float32, n*count)
	for r, e := range envs {
		send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*n*count)
		v := make([]float32, count)
		for i := range v {
			v[i] = val(r, i)
			want[r*count+i] = v[i]
		}
		e.put(t, send[r], v)
	}
	g := NewGroup()
	for r, e := range envs {
		require.NoError(t, g.AllGather(e.c, send[r], recv[r], count, Float32, e.s))
	}
	require.NoError(t, g.End())
	waitAll(t, envs)
	for r, e := range envs {
		checkEq(t, fmt.Sprintf("%d ranks: rank %d AllGather(%d)", n, r, count), e.get(t, recv[r], n*count), want)
	}
}

func runSplitBroadcast(t *testing.T, envs []*rankEnv, count, root int) {
	n := len(envs)
	bufs := make([]cuda.DevicePtr, n)
	want := make([]float32, count)
	for i := range want {
		want[i] = val(root, i)
	}
	for r, e := range envs {
		bufs[r] = e.alloc(t, 4*count)
		if r == root {
			e.put(t, bufs[r], want)
		}
	}
	g := NewGroup()
	for r, e := range envs {
		require.NoError(t, g.Broadcast(e.c, bufs[r], bufs[r], count, Float32, root, e.s))
	}
	require.NoError(t, g.End())
	waitAll(t, envs)
	for r, e := range envs {
		checkEq(t, fmt.Sprintf("%d ranks: rank %d Broadcast(%d, root %d)", n, r, count, root), e.get(t, bufs[r], count), want)
	}
}

func runSuite(t *testing.T, envs []*rankEnv) {
	for _, count := range []int{1, 1000, 1<<18 + 3} {
		runAllReduce(t, envs, count, true)
		runSplitAllGather(t, envs, count)
		runSplitBroadcast(t, envs, count, len(envs)-1)
	}
}

// TestGPUSplit splits 8 ranks on GPU 0 into communicators of 1, 2 and 4
// ranks (the 4 ordered backwards by key; one rank with no color) and runs
// AllReduce, AllGather and Broadcast on each, then on the parent again.
func TestGPUSplit(t *testing.T) {
	gpuOrSkip(t)
	parents := envsOf(t, mustInitAll(t, []int{0, 0, 0, 0, 0, 0, 0, 0}))
	color := []int{0, 1, 1, 2, 2, 2, 2, SplitNoColor}
	key := []int{0, 0, 0, 9, 8, 7, 6, 0}
	kids, errs := testutil.OnEveryRank(8, func(r int) (*Comm, error) {
		return parents[r].c.Split(context.Background(), color[r], key[r], nil)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Nil(t, kids[7])
	groups := byRank(kids, [][]int{{0}, {1, 2}, {3, 4, 5, 6}})
	for i, c := range groups[2] {
		require.Same(t, kids[6-i], c, "rank %d of 4: ordered by key", i)
	}
	for _, g := range groups {
		t.Run(fmt.Sprintf("%dranks", len(g)), func(t *testing.T) {
			runSuite(t, envsOf(t, g))
		})
	}
	runAllReduce(t, parents, 4097, true)
}

// TestGPUSplitTwoGPUs: ranks on GPUs 0 and 1 split into two communicators
// that each span both GPUs.
func TestGPUSplitTwoGPUs(t *testing.T) {
	gpuOrSkip(t)
	if n, _ := cuda.DeviceCount(); n < 2 {
		t.Skipf("needs 2 GPUs, %d visible", n)
	}
	parents := envsOf(t, mustInitAll(t, []int{0, 1, 0, 1}))
	kids, errs := testutil.OnEveryRank(4, func(r int) (*Comm, error) {
		return parents[r].c.Split(context.Background(), r/2, 0, nil)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for _, g := range byRank(kids, [][]int{{0, 1}, {2, 3}}) {
		runSuite(t, envsOf(t, g))
	}
}

// TestGPUShrink shrinks 4 ranks on GPU 0 to 3, excluding rank 3: in the
// default mode (the parent then still runs), and in abort mode with rank 3
// aborted as if dead.
func TestGPUShrink(t *testing.T) {
	gpuOrSkip(t)
	for _, abort := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "abort"}[abort], func(t *testing.T) {
			parents := envsOf(t, mustInitAll(t, []int{0, 0, 0, 0}))
			if abort {
				parents[3].c.Abort()
			}
			kids, errs := testutil.OnEveryRank(3, func(r int) (*Comm, error) {
				return parents[r].c.Shrink(context.Background(), []int{3}, nil, abort)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			runSuite(t, envsOf(t, kids))
			if abort {
				for _, p := range parents {
					require.ErrorIs(t, p.c.Err(), ErrAborted)
				}
			} else {
				runAllReduce(t, parents, 12345, true)
			}
		})
	}
}

func mustInitAll(t *testing.T, devs []int) []*Comm {
	t.Helper()
	comms, err := InitAll(context.Background(), devs, nil)
	require.NoError(t, err)
	return comms
}
