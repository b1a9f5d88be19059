package tests

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/pattern"
	"github.com/ncclgo/ncclgo/kspace"
)

// These CPU tests (no GPU needed) feed the suite's checker — the group
// runner's expectation and its check of every rank's arena — outputs
// corrupted the ways real bugs corrupt them, and require each to be caught.

// corrupt returns rank r's expected arena after g with f applied.
func corrupt(g *groupRun, r int, f func(b []byte)) []byte {
	b := bytes.Clone(g.after[r])
	f(b)
	return b
}

func TestCheckerCatchesCorruption(t *testing.T) {
	const seed = 15
	for _, n := range []int{4, 8} {
		for _, ty := range []kspace.Type{kspace.U8, kspace.F16, kspace.BF16, kspace.F32, kspace.F8E5M2, kspace.I64} {
			es := ty.Size()
			const cnt = 41
			prevSeed, curSeed := pattern.Mix(seed, 1), pattern.Mix(seed, 2)
			calls := func(s uint64) []call {
				return []call{
					{kind: kindColl, coll: kspace.AllGather, ty: ty, count: cnt, seed: s},
					{kind: kindColl, coll: kspace.AllReduce, ty: ty, o: ops[0], count: n * cnt, mis: true, seed: s},
					{kind: kindColl, coll: kspace.ReduceScatter, ty: ty, o: ops[3], count: cnt, inPlace: true, seed: s},
					{kind: kindAllToAll, ty: ty, count: cnt, seed: s},
					{kind: kindSendRecv, ty: ty, count: cnt, shift: 1, seed: s},
				}
			}
			g, err := planGroup(calls(curSeed), n, seed)
			require.NoError(t, err)
			prev, err := planGroup(calls(prevSeed), n, seed)
			require.NoError(t, err)
			for r := range n {
				require.Empty(t, g.check(r, bytes.Clone(g.after[r])), "the correct result")
			}
			r := 2
			ag := g.outs[r][0] // AllGather: n blocks of cnt elements
			ar := g.outs[r][1] // AllReduce
			rs := g.outs[r][2] // ReduceScatter, in place
			blk := func(o output, b int) (int, int) { return o.at + b*cnt*es, o.at + (b+1)*cnt*es }
			cases := map[string][]byte{
				"AllGather blocks of ranks 0 and 3 swapped": corrupt(g, r, func(b []byte) {
					s0, e0 := blk(ag, 0)
					s3, e3 := blk(ag, 3)
					b0 := bytes.Clone(b[s0:e0])
					copy(b[s0:e0], b[s3:e3])
					copy(b[s3:e3], b0)
				}),
				"AllReduce result of rank 0's block in rank 3's place": corrupt(g, r, func(b []byte) {
					s0, e0 := blk(ar, 0)
					s3, _ := blk(ar, 3)
					copy(b[s3:], b[s0:e0])
				}),
				"ReduceScatter result of another rank": corrupt(g, r, func(b []byte) {
					copy(b[rs.at:], pattern.Results(curSeed, ty, pattern.Min, n, 1, uint64((r+1)%n*cnt), cnt))
				}),
				"AllGather element stale from the previous call": corrupt(g, r, func(b []byte) {
					s, _ := blk(ag, 1)
					p := prev.outs[r][0]
					copy(b[s+5*es:s+6*es], p.want[cnt*es+5*es:])
				}),
				"AllReduce element stale from the previous call": corrupt(g, r, func(b []byte) {
					p := prev.outs[r][1]
					for e := range n * cnt {
						if !bytes.Equal(p.want[e*es:(e+1)*es], ar.want[e*es:(e+1)*es]) {
							copy(b[ar.at+e*es:], p.want[e*es:(e+1)*es])
							return
						}
					}
					panic("no element differs between two calls")
				}),
				"AllGather element written one past the end": corrupt(g, r, func(b []byte) {
					end := ag.at + len(ag.want)
					copy(b[end:end+es], ag.want[:es])
					b[end] ^= 0x80
				}),
				"SendRecv element written one before the start": corrupt(g, r, func(b []byte) {
					o := g.outs[r][4]
					b[o.at-1] ^= 1
				}),
				"a stray write between two outputs": corrupt(g, r, func(b []byte) {
					b[ag.at+len(ag.want)+pattern.Guard+1] ^= 4
				}),
			}
			for _, k := range []int{1, 3, 6} {
				for _, o := range []struct {
					name string
					out  output
				}{{"AllGather", ag}, {"AllToAll", g.outs[r][3]}, {"AllReduce", ar}} {
					cases[fmt.Sprintf("%s block 1 written %d elements late", o.name, k)] = corrupt(g, r, func(b []byte) {
						s, e := blk(o.out, 1)
						src := bytes.Clone(b[s:e])
						copy(b[s:s+k*es], prev.after[r][s:s+k*es])
						copy(b[s+k*es:], src)
					})
					cases[fmt.Sprintf("%s block 1 written %d elements early", o.name, k)] = corrupt(g, r, func(b []byte) {
						s, e := blk(o.out, 1)
						src := bytes.Clone(b[s:e])
						copy(b[s-k*es:], src)
					})
				}
			}
			for how, bad := range cases {
				if errs := g.check(r, bad); len(errs) == 0 {
					t.Errorf("%s n=%d: %s was not caught", ty, n, how)
				}
			}
		}
	}
}

// TestPlanGroupLayout: outputs never overlap another call's buffers or
// guards, in place and out of place.
func TestPlanGroupLayout(t *testing.T) {
	calls := []call{
		{kind: kindColl, coll: kspace.AllGather, ty: kspace.F32, count: 5, inPlace: true},
		{kind: kindColl, coll: kspace.ReduceScatter, ty: kspace.F16, o: ops[0], count: 3, inPlace: true, mis: true},
		{kind: kindColl, coll: kspace.Broadcast, ty: kspace.U8, count: 0, root: 1},
		{kind: kindScatter, ty: kspace.I64, count: 2, root: 2},
	}
	g, err := planGroup(calls, 3, 1)
	require.NoError(t, err)
	for r := range 3 {
		require.Len(t, g.before[r], len(g.after[r]))
		for _, o := range g.outs[r] {
			require.GreaterOrEqual(t, o.at, pattern.Guard)
			require.LessOrEqual(t, o.at+len(o.want)+pattern.Guard, len(g.after[r]))
		}
		// In place: ReduceScatter's output is rank r's block of its input.
		require.Equal(t, g.send[1][r]+r*3*2, g.recv[1][r])
		require.Equal(t, g.recv[0][r]+r*5*4, g.send[0][r])
		require.EqualValues(t, offsetFor(kspace.F16), g.send[1][r]%256, "misaligned")
	}
}
