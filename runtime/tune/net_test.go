package tune

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
)

// fakeHosts is nRanks ranks on nNodes fake hosts sharing one H200, joined
// by a socket network of NCCL's default speed.
func fakeHosts(nRanks, nNodes int) Topology {
	return Topology{NRanks: nRanks, NNodes: nNodes, NGPUs: 1, RanksPerGPU: nRanks, SMCount: 132, BlocksPerSM: 1,
		IntraBW: 20, InterBW: SocketNetBW, NetBW: SocketNetBW, NChannels: 32}
}

// noLL128 is what the engine allows when a connection uses NET.
func noLL128(f kspace.Func) bool { return f.Proto != kspace.LL128 }

func TestNetChoices(t *testing.T) {
	cases := []struct {
		name  string
		topo  Topology
		coll  kspace.Coll
		bytes int64
		algo  kspace.Algo
		proto kspace.Proto
	}{
		{"8 B AllReduce, 2 hosts", fakeHosts(2, 2), kspace.AllReduce, 8, kspace.Ring, kspace.LL},
		{"8 B AllReduce, 4 hosts", fakeHosts(4, 4), kspace.AllReduce, 8, kspace.Tree, kspace.LL},
		{"8 B AllReduce, 4 hosts x 2", fakeHosts(8, 4), kspace.AllReduce, 8, kspace.Tree, kspace.LL},
		{"4 KiB AllReduce, 8 hosts x 2", fakeHosts(16, 8), kspace.AllReduce, 4096, kspace.Tree, kspace.LL},
		{"8 B AllGather, 4 hosts", fakeHosts(4, 4), kspace.AllGather, 8, kspace.Ring, kspace.LL},
		{"4 KiB AllGather, 2 hosts", fakeHosts(2, 2), kspace.AllGather, 4096, kspace.Ring, kspace.LL},
		{"1 MiB AllReduce, 2 hosts", fakeHosts(2, 2), kspace.AllReduce, 1 << 20, kspace.Ring, kspace.Simple},
		{"256 MiB AllReduce, 4 hosts x 2", fakeHosts(8, 4), kspace.AllReduce, 256 << 20, kspace.Ring, kspace.Simple},
		{"256 MiB ReduceScatter, 3 hosts", fakeHosts(3, 3), kspace.ReduceScatter, 256 << 20, kspace.Ring, kspace.Simple},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, err := newTuner(t, c.topo, nil, noLL128).Choose(c.coll, kspace.Sum, kspace.F32, c.bytes)
			require.NoError(t, err)
			assert.Equal(t, c.algo, ch.Algo, "%v", ch)
			assert.Equal(t, c.proto, ch.Proto, "%v", ch)
		})
	}
}

// Across hosts no call is predicted faster than the network carries its
// bytes: the bus bandwidth (nccl-tests' busbw) stays within NetBW.
func TestNetBandwidthCapped(t *testing.T) {
	for _, tp := range []Topology{fakeHosts(2, 2), fakeHosts(4, 2), fakeHosts(8, 4), fakeHosts(3, 3)} {
		tu := newTuner(t, tp, nil, noLL128)
		for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast} {
			for _, bytes := range []int64{1 << 20, 64 << 20, 1 << 30} {
				ch, err := tu.Choose(coll, kspace.Sum, kspace.F32, bytes)
				require.NoError(t, err)
				algBW := float64(bytes) / float64(ch.PredictedTime.Nanoseconds()) // GB/s
				busBW := algBW * coll.BusFactor(tp.NRanks)
				assert.LessOrEqual(t, busBW, tp.NetBW*1.0001, "%d ranks on %d hosts, %v of %d B: %v", tp.NRanks, tp.NNodes, coll, bytes, ch)
			}
		}
		ch, err := tu.Choose(kspace.SendRecv, kspace.Sum, kspace.F32, 1<<30)
		require.NoError(t, err)
		assert.LessOrEqual(t, float64(1<<30)/float64(ch.PredictedTime.Nanoseconds()), tp.NetBW*1.0001, "SendRecv: %v", ch)
	}
	// Without NetBW the channels' InterBW adds up, as before the model.
	tp := fakeHosts(2, 2)
	tp.NetBW = 0
	ch, err := newTuner(t, tp, nil, noLL128).Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<30)
	require.NoError(t, err)
	assert.Greater(t, float64(1<<30)/float64(ch.PredictedTime.Nanoseconds()), 10*SocketNetBW, "%v", ch)
}

// NCCL's latency rules across nodes: with one rank per node every hop
// costs the tree's network latency; a ring AllReduce crosses nodes
// 2(nodes-1) times.
func TestNetLatency(t *testing.T) {
	ppn1 := newTuner(t, fakeHosts(4, 4), nil, noLL128)
	// Ring LL AllReduce on 4 ranks: 6 steps, all between nodes, each the
	// tree's LL hop (5.0 µs), on the ring's LL base (6.6 µs).
	assert.InDelta(t, 6.6+6*5.0, ppn1.latency(kspace.AllReduce, kspace.Ring, kspace.LL, 8), 1e-9)
	// AllGather: 3 steps between nodes.
	assert.InDelta(t, 6.6+3*5.0, ppn1.latency(kspace.AllGather, kspace.Ring, kspace.LL, 8), 1e-9)

	ppn2 := newTuner(t, fakeHosts(8, 4), nil, noLL128)
	// 14 steps, 2(4-1) = 6 between nodes at the ring's LL hop (2.7 µs), 8
	// inside at max(NVLink's 0.6, the net overhead 1.0).
	assert.InDelta(t, 6.6+6*2.7+8*1.0, ppn2.latency(kspace.AllReduce, kspace.Ring, kspace.LL, 8), 1e-9)
	// Tree: a chain of 2 per node and log2(4) = 2 levels of hosts, both ways.
	assert.InDelta(t, 6.8+2*(1*0.6+2*5.0), ppn2.latency(kspace.AllReduce, kspace.Tree, kspace.LL, 8), 1e-9)

	// Without NetBW: model.go's figures as they were (2·nodes inter steps).
	tp := fakeHosts(8, 4)
	tp.NetBW = 0
	old := newTuner(t, tp, nil, noLL128)
	assert.InDelta(t, 6.6+8*2.7+6*1.0, old.latency(kspace.AllReduce, kspace.Ring, kspace.LL, 8), 1e-9)
}

func TestNetBWInvalid(t *testing.T) {
	for _, bw := range []float64{-1, math.Inf(1), math.NaN()} {
		tp := fakeHosts(2, 2)
		tp.NetBW = bw
		_, err := New(tp, envConfig(t, nil), nil)
		require.ErrorIs(t, err, ErrTopology, "NetBW=%v", bw)
		assert.ErrorContains(t, err, "NetBW=")
	}
}

// A small LL AllReduce on 2 ranks runs in one hop (devicesrc/all_reduce.h):
// the ring's model costs it one step instead of 2(n-1) = 2, up to
// NG_ALLREDUCE_ONEHOP_BYTES, and it is chosen over TREE on two hosts.
func TestRingOneHopLatency(t *testing.T) {
	hosts := newTuner(t, fakeHosts(2, 2), nil, noLL128)
	// One rank per host: each network hop costs the tree's LL figure (5.0 µs).
	assert.InDelta(t, 6.6+1*5.0, hosts.latency(kspace.AllReduce, kspace.Ring, kspace.LL, 8), 1e-9)
	assert.InDelta(t, 6.6+1*5.0, hosts.latency(kspace.AllReduce, kspace.Ring, kspace.LL, generated.AllreduceOnehopBytes), 1e-9)
	assert.InDelta(t, 6.6+2*5.0, hosts.latency(kspace.AllReduce, kspace.Ring, kspace.LL, generated.AllreduceOnehopBytes+1), 1e-9)
	// Only LL, only AllReduce.
	assert.InDelta(t, 8.4+2*14.0, hosts.latency(kspace.AllReduce, kspace.Ring, kspace.Simple, 8), 1e-9)
	assert.InDelta(t, 6.6+1*5.0, hosts.latency(kspace.AllGather, kspace.Ring, kspace.LL, 8), 1e-9)
	ch, err := hosts.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.Equal(t, kspace.Ring, ch.Algo, "%v", ch)
	assert.Equal(t, kspace.LL, ch.Proto, "%v", ch)

	// Three ranks: the ring as before.
	three := newTuner(t, fakeHosts(3, 3), nil, noLL128)
	assert.InDelta(t, 6.6+4*5.0, three.latency(kspace.AllReduce, kspace.Ring, kspace.LL, 8), 1e-9)
}
