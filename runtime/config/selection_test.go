package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

func TestNCCLNamesMatchKspace(t *testing.T) {
	// NCCL's names are indexed by kspace's values; kspace's own spellings
	// must parse to the same element.
	for a := kspace.Algo(0); a < kspace.NumAlgos; a++ {
		s, err := ParseAlgoSelection(a.String())
		require.NoError(t, err)
		assert.Equal(t, []kspace.Algo{a}, s.Allowed(kspace.AllReduce), a.String())
		s, err = ParseAlgoSelection(ncclAlgoNames[a])
		require.NoError(t, err)
		assert.Equal(t, []kspace.Algo{a}, s.Allowed(kspace.AllReduce), ncclAlgoNames[a])
	}
	for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
		s, err := ParseProtoSelection(p.String())
		require.NoError(t, err)
		assert.Equal(t, []kspace.Proto{p}, s.Allowed(kspace.AllGather))
	}
}

func TestAlgoSelectionGrammar(t *testing.T) {
	all := []kspace.Algo{kspace.Tree, kspace.Ring, kspace.CollNetDirect, kspace.CollNetChain, kspace.NVLS, kspace.NVLSTree, kspace.PAT, kspace.Direct}
	tr, ri := kspace.Tree, kspace.Ring
	type want map[kspace.Coll][]kspace.Algo
	cases := []struct {
		spec string
		want want
	}{
		{"", want{kspace.AllReduce: all, kspace.AllGather: all}},
		{"ring", want{kspace.AllReduce: {ri}, kspace.AllGather: {ri}, kspace.Broadcast: {ri}}},
		{"RING,tree", want{kspace.AllReduce: {tr, ri}, kspace.ReduceScatter: {tr, ri}}},
		{" Ring , Tree ", want{kspace.AllReduce: {tr, ri}}},
		{"ring,,tree", want{kspace.AllReduce: {tr, ri}}},
		{"^tree", want{kspace.AllReduce: all[1:], kspace.AllGather: all[1:]}},
		{"^", want{kspace.AllReduce: all}},
		{"ring;allreduce:tree,ring", want{kspace.AllReduce: {tr, ri}, kspace.AllGather: {ri}, kspace.Reduce: {ri}}},
		{"ring;AllReduce:tree", want{kspace.AllReduce: {tr}, kspace.AllGather: {ri}}},
		{"all_reduce:tree", want{kspace.AllReduce: {tr}, kspace.AllGather: all}},
		{"allgather:ring", want{kspace.AllGather: {ri}, kspace.AllReduce: all, kspace.AllGatherV: all}},
		{"^tree;allreduce:^ring", want{kspace.AllReduce: {tr, kspace.CollNetDirect, kspace.CollNetChain, kspace.NVLS, kspace.NVLSTree, kspace.PAT, kspace.Direct}, kspace.AllGather: all[1:]}},
		{"ring;allreduce:tree;allreduce:ring", want{kspace.AllReduce: {ri}}}, // a later section replaces an earlier one
		{"collnet", want{kspace.AllReduce: {kspace.CollNetDirect, kspace.CollNetChain}}},
		{"COLLNET_DIRECT,nvls_tree", want{kspace.AllReduce: {kspace.CollNetDirect, kspace.NVLSTree}}},
		// DIRECT is ncclgo's own algorithm, not CollNetDirect.
		{"direct", want{kspace.AllReduce: {kspace.Direct}}},
		{"allreduce:Direct", want{kspace.AllReduce: {kspace.Direct}, kspace.AllGather: all}},
		{"ring;", want{kspace.AllReduce: {ri}}},
		{"ring;;allreduce:tree", want{kspace.AllReduce: {tr}}},
		// Unprefixed sections leave SendRecv alone (NCCL_ALGO never steers p2p).
		{"tree", want{kspace.SendRecv: all, kspace.AllReduce: {tr}}},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			s, err := ParseAlgoSelection(c.spec)
			require.NoError(t, err)
			for coll, w := range c.want {
				assert.Equal(t, w, s.Allowed(coll), "%s", coll)
			}
			assert.Equal(t, c.spec, s.String())
			assert.Equal(t, c.spec != "", s.IsSet())
		})
	}
}

func TestProtoSelectionGrammar(t *testing.T) {
	ll, ll128, simple := kspace.LL, kspace.LL128, kspace.Simple
	all := []kspace.Proto{ll, ll128, simple}
	type want map[kspace.Coll][]kspace.Proto
	cases := []struct {
		spec string
		want want
	}{
		{"^LL", want{kspace.AllReduce: {ll128, simple}, kspace.SendRecv: all}},
		{"simple", want{kspace.AllReduce: {simple}, kspace.Broadcast: {simple}}},
		{"LL,Simple;allreduce:^LL", want{kspace.AllReduce: {ll128, simple}, kspace.AllGather: {ll, simple}}},
		{"^LL128;allreduce:LL128", want{kspace.AllReduce: {ll128}, kspace.AllGather: {ll, simple}}},
		{"sendrecv:simple", want{kspace.SendRecv: {simple}, kspace.AllReduce: all}},
		{"ll128;SendRecv:^ll", want{kspace.SendRecv: {ll128, simple}, kspace.Reduce: {ll128}}},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			s, err := ParseProtoSelection(c.spec)
			require.NoError(t, err)
			for coll, w := range c.want {
				assert.Equal(t, w, s.Allowed(coll), "%s", coll)
			}
		})
	}
}

func TestSelectionErrors(t *testing.T) {
	cases := []struct {
		algo bool
		spec string
		msg  string
	}{
		{true, "ring,foo", `unknown algorithm "foo"; valid: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT, Direct (alias collnet = CollNetDirect+CollNetChain)`},
		{false, "LL256", `unknown protocol "LL256"; valid: LL, LL128, Simple`},
		{true, "allreduc:ring", `unknown collective "allreduc" in section "allreduc:ring"; valid prefixes: Broadcast, Reduce, AllGather, AllGatherV, ReduceScatter, AllReduce`},
		{true, "sendrecv:ring", `unknown collective "sendrecv"`},
		{true, "allreduce:tree;ring", `section "ring" lacks a collective prefix`},
		{true, "allreduce:", `section "allreduce:" names no algorithm`},
		{false, ",", `section "," names no protocol`},
		{true, "allreduce:tree:ring", `has more than one ':'`},
		{true, "tree ring", `unknown algorithm "tree ring"`},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			var err error
			if c.algo {
				_, err = ParseAlgoSelection(c.spec)
			} else {
				_, err = ParseProtoSelection(c.spec)
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrSelection))
			assert.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestSelectionZeroAllowsAll(t *testing.T) {
	var s AlgoSelection
	for c := kspace.Coll(0); c < kspace.NumColls; c++ {
		for a := kspace.Algo(0); a < kspace.NumAlgos; a++ {
			assert.True(t, s.Allows(c, a))
		}
	}
	assert.False(t, s.Allows(kspace.NumColls, kspace.Ring))
	assert.False(t, s.Allows(kspace.AllReduce, kspace.NumAlgos))
	assert.False(t, s.Allows(-1, kspace.Ring))
	assert.Equal(t, "NCCL_ALGO unset", s.Describe())
}

func TestSelectionText(t *testing.T) {
	var s ProtoSelection
	require.NoError(t, s.UnmarshalText([]byte("^LL")))
	assert.False(t, s.Allows(kspace.AllReduce, kspace.LL))
	b, err := s.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "^LL", string(b))
	assert.Equal(t, `NCCL_PROTO="^LL"`, s.Describe())
	assert.Error(t, s.UnmarshalText([]byte("nope")))
}

func FuzzParseSelection(f *testing.F) {
	for _, s := range []string{"", "ring", "^tree", "ring;allreduce:tree,ring", "LL,Simple;allreduce:^LL",
		"^LL128;allreduce:LL128", "collnet", "a:b:c", ";;", "^", ":", "sendrecv:simple", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		check := func(allows func(kspace.Coll, int) bool, str string, n int) {
			for c := kspace.Coll(-1); c <= kspace.NumColls; c++ {
				for e := -1; e <= n; e++ {
					allows(c, e)
				}
			}
			if str != spec {
				t.Fatalf("String() = %q, want %q", str, spec)
			}
		}
		if a, err := ParseAlgoSelection(spec); err == nil {
			check(func(c kspace.Coll, e int) bool { return a.Allows(c, kspace.Algo(e)) }, a.String(), int(kspace.NumAlgos))
			b, err := ParseAlgoSelection(a.String())
			if err != nil || b != a {
				t.Fatalf("reparse of %q: %v", spec, err)
			}
		} else if !errors.Is(err, ErrSelection) {
			t.Fatalf("error without ErrSelection: %v", err)
		}
		if p, err := ParseProtoSelection(spec); err == nil {
			check(func(c kspace.Coll, e int) bool { return p.Allows(c, kspace.Proto(e)) }, p.String(), int(kspace.NumProtos))
		} else if !errors.Is(err, ErrSelection) {
			t.Fatalf("error without ErrSelection: %v", err)
		}
	})
}
