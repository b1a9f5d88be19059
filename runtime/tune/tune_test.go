package tune

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// h200 is one H200 with every rank of the communicator on it.
func h200(nRanks int) Topology {
	return Topology{NRanks: nRanks, NNodes: 1, NGPUs: 1, RanksPerGPU: nRanks, SMCount: 132, BlocksPerSM: 1, IntraBW: 20}
}

func envConfig(t *testing.T, m map[string]string) config.Config {
	t.Helper()
	c, err := config.FromEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
	require.NoError(t, err)
	return c
}

func newTuner(t *testing.T, topo Topology, env map[string]string, avail func(kspace.Func) bool) *Tuner {
	t.Helper()
	tu, err := New(topo, envConfig(t, env), avail)
	require.NoError(t, err)
	return tu
}

var sizes = []int64{0, 1, 8, 1000, 4096, 65536, 1 << 20, 1<<20 + 3, 16 << 20, 256 << 20, 1 << 32}

func TestChoices(t *testing.T) {
	cases := []struct {
		name  string
		topo  Topology
		env   map[string]string
		coll  kspace.Coll
		bytes int64
		algo  kspace.Algo
		proto kspace.Proto
	}{
		{"small AllReduce on 8 ranks uses LL", h200(8), nil, kspace.AllReduce, 8, kspace.Ring, kspace.LL},
		{"large AllReduce on 8 ranks uses SIMPLE", h200(8), nil, kspace.AllReduce, 256 << 20, kspace.Ring, kspace.Simple},
		{"large AllReduce on 2 ranks uses SIMPLE", h200(2), nil, kspace.AllReduce, 512 << 20, kspace.Ring, kspace.Simple},
		{"medium AllReduce on 8 ranks uses TREE/LL", h200(8), nil, kspace.AllReduce, 65536, kspace.Tree, kspace.LL},
		{"small AllGather uses LL", h200(4), nil, kspace.AllGather, 1024, kspace.Ring, kspace.LL},
		{"large AllGather uses SIMPLE", h200(4), nil, kspace.AllGather, 256 << 20, kspace.Ring, kspace.Simple},
		{"NCCL_ALGO=tree forces TREE for AllReduce", h200(8), map[string]string{"NCCL_ALGO": "tree"}, kspace.AllReduce, 256 << 20, kspace.Tree, kspace.Simple},
		{"NCCL_ALGO=ring;allreduce:tree leaves AllGather on RING", h200(8), map[string]string{"NCCL_ALGO": "ring;allreduce:tree"}, kspace.AllGather, 8, kspace.Ring, kspace.LL},
		{"NCCL_PROTO=^LL on small AllReduce", h200(8), map[string]string{"NCCL_PROTO": "^LL"}, kspace.AllReduce, 8, kspace.Tree, kspace.LL128},
		{"NCCL_PROTO=simple on small AllReduce", h200(8), map[string]string{"NCCL_PROTO": "simple"}, kspace.AllReduce, 8, kspace.Ring, kspace.Simple},
		{"NCCL_PROTO=allreduce:LL on large AllReduce", h200(8), map[string]string{"NCCL_PROTO": "allreduce:LL"}, kspace.AllReduce, 256 << 20, kspace.Ring, kspace.LL},
		{"ReduceScatter", h200(4), nil, kspace.ReduceScatter, 256 << 20, kspace.Ring, kspace.Simple},
		{"Broadcast", h200(4), nil, kspace.Broadcast, 8, kspace.Ring, kspace.LL},
		{"Reduce", h200(4), nil, kspace.Reduce, 256 << 20, kspace.Ring, kspace.Simple},
		{"one rank uses RING/SIMPLE", h200(1), nil, kspace.AllReduce, 8, kspace.Ring, kspace.Simple},
		{"two fake hosts", Topology{NRanks: 4, NNodes: 2, RanksPerGPU: 4, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, InterBW: 2}, nil, kspace.AllReduce, 256 << 20, kspace.Ring, kspace.Simple},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tu := newTuner(t, c.topo, c.env, nil)
			ch, err := tu.Choose(c.coll, kspace.Sum, kspace.F32, c.bytes)
			require.NoError(t, err)
			assert.Equal(t, c.algo, ch.Algo, "algorithm: %v", ch)
			assert.Equal(t, c.proto, ch.Proto, "protocol: %v", ch)
			assert.Equal(t, c.algo, ch.Func.Algo)
			assert.Equal(t, c.proto, ch.Func.Proto)
			assert.Equal(t, c.coll, ch.Func.Coll)
			assert.GreaterOrEqual(t, ch.NChannels, 1)
			assert.Positive(t, ch.NThreads)
			assert.Zero(t, ch.NThreads%config.WarpSize)
		})
	}
}

func TestPredictedTimeGrowsWithSize(t *testing.T) {
	tu := newTuner(t, h200(8), nil, nil)
	prev := time.Duration(-1)
	for _, b := range sizes {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, ch.PredictedTime, prev, "%d bytes", b)
		prev = ch.PredictedTime
	}
	ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.Less(t, ch.PredictedTime, 100*time.Microsecond)
}

func TestProtoExclusionRespected(t *testing.T) {
	for _, spec := range []string{"^LL", "^LL,LL128", "LL128", "allreduce:^LL;"} {
		sel, err := config.ParseProtoSelection(spec)
		require.NoError(t, err)
		tu := newTuner(t, h200(8), map[string]string{"NCCL_PROTO": spec}, nil)
		for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast, kspace.Reduce} {
			for _, b := range sizes {
				ch, err := tu.Choose(coll, kspace.Sum, kspace.F32, b)
				require.NoError(t, err)
				assert.True(t, sel.Allows(coll, ch.Proto), "%s: %s %d bytes got %v", spec, coll, b, ch)
			}
		}
	}
}

func TestChannelCap(t *testing.T) {
	cases := []struct {
		name    string
		topo    Topology
		env     map[string]string
		wantMax int
	}{
		{"4 ranks on an H200", h200(4), nil, 33},
		{"8 ranks on an H200", h200(8), nil, 16},
		{"8 ranks, NCCL_NCHANNELS=64 is clamped", h200(8), map[string]string{"NCCL_NCHANNELS": "64"}, 16},
		{"4 ranks, NCCL_MIN_NCHANNELS=40 is clamped", h200(4), map[string]string{"NCCL_MIN_NCHANNELS": "40"}, 33},
		{"4 ranks, small GPU", Topology{NRanks: 4, RanksPerGPU: 4, SMCount: 8, BlocksPerSM: 1, IntraBW: 20}, nil, 2},
		{"8 ranks, small GPU", Topology{NRanks: 8, RanksPerGPU: 8, SMCount: 8, BlocksPerSM: 1, IntraBW: 20}, map[string]string{"NCCL_NCHANNELS": "4"}, 1},
		{"8 ranks, 2 blocks per SM", Topology{NRanks: 8, RanksPerGPU: 8, SMCount: 132, BlocksPerSM: 2, IntraBW: 20}, nil, 33},
		{"one rank per GPU caps at 64", Topology{NRanks: 8, NGPUs: 8, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1, IntraBW: 20}, nil, 64},
		{"NCCL_MAX_NCHANNELS below the cap", h200(4), map[string]string{"NCCL_MAX_NCHANNELS": "8"}, 8},
		{"topology's channels", Topology{NRanks: 2, RanksPerGPU: 2, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 12}, nil, 12},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tu := newTuner(t, c.topo, c.env, nil)
			assert.Equal(t, c.wantMax, tu.MaxChannels())
			resident := c.topo.SMCount * c.topo.BlocksPerSM
			seenMax := 0
			for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter, kspace.Broadcast, kspace.Reduce, kspace.SendRecv} {
				for _, b := range sizes {
					ch, err := tu.Choose(coll, kspace.Sum, kspace.F32, b)
					require.NoError(t, err)
					assert.LessOrEqual(t, ch.NChannels*max(c.topo.RanksPerGPU, 1), resident, "%s %d bytes: %v", coll, b, ch)
					assert.LessOrEqual(t, ch.NChannels, config.MaxChannels)
					assert.GreaterOrEqual(t, ch.NChannels, tu.MinChannels())
					seenMax = max(seenMax, ch.NChannels)
				}
			}
			assert.Equal(t, c.wantMax, seenMax, "large calls use every channel")
		})
	}
}

func TestChannelsShrinkForSmallMessages(t *testing.T) {
	tu := newTuner(t, h200(2), nil, nil)
	small, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	large, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 256<<20)
	require.NoError(t, err)
	assert.Equal(t, 1, small.NChannels)
	assert.Equal(t, 64, large.NChannels)

	forced := newTuner(t, h200(2), map[string]string{"NCCL_NCHANNELS": "6"}, nil)
	for _, b := range sizes {
		ch, err := forced.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		assert.Equal(t, 6, ch.NChannels, "NCCL_NCHANNELS holds for %d bytes", b)
	}
	floor := newTuner(t, h200(2), map[string]string{"NCCL_MIN_NCHANNELS": "3"}, nil)
	ch, err := floor.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 8)
	require.NoError(t, err)
	assert.Equal(t, 3, ch.NChannels)
}

func TestClampIsLogged(t *testing.T) {
	var buf bytes.Buffer
	cfg := envConfig(t, map[string]string{"NCCL_NCHANNELS": "64", "NCCL_DEBUG": "WARN"})
	tu, err := New(h200(8), cfg, nil, WithLogger(config.NewLogger(cfg, &buf)))
	require.NoError(t, err)
	assert.Equal(t, 16, tu.MaxChannels())
	assert.Contains(t, buf.String(), "NCCL WARN NCCL_NCHANNELS=64 clamped to 16: 8 ranks share one GPU")
	assert.Contains(t, buf.String(), "deadlock")
}

func TestChoicesAreLogged(t *testing.T) {
	var buf bytes.Buffer
	cfg := envConfig(t, map[string]string{"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "TUNING"})
	tu, err := New(h200(4), cfg, nil, WithLogger(config.NewLogger(cfg, &buf)))
	require.NoError(t, err)
	_, err = tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<20)
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "NCCL INFO tuner ready subsys=TUNING")
	assert.Contains(t, buf.String(), "NCCL TRACE choice subsys=TUNING coll=AllReduce bytes=1048576")

	buf.Reset()
	cfg = envConfig(t, map[string]string{"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "^TUNING"})
	tu, err = New(h200(4), cfg, nil, WithLogger(config.NewLogger(cfg, &buf)))
	require.NoError(t, err)
	_, err = tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 1<<20)
	require.NoError(t, err)
	assert.Empty(t, buf.String())
}

// slim returns an availability function that keeps the functions matching
// a kspace filter, as a slim build's table would.
func slim(t *testing.T, pattern string) func(kspace.Func) bool {
	f := kspace.MustParseFilter(pattern)
	return func(fn kspace.Func) bool { return f.Match(kspace.Primary(fn)) || f.Match(fn) }
}

func TestImpossibleChoices(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		avail func(kspace.Func) bool
		coll  kspace.Coll
		op    kspace.RedOp
		ty    kspace.Type
		msg   string
	}{
		{"tree for AllGather", map[string]string{"NCCL_ALGO": "tree"}, nil, kspace.AllGather, 0, 0,
			`tune: no algorithm and protocol to run: NCCL_ALGO="tree" leaves no algorithm for AllGather; available: RING`},
		{"collnet for AllReduce", map[string]string{"NCCL_ALGO": "collnet"}, nil, kspace.AllReduce, kspace.Sum, kspace.F32,
			`NCCL_ALGO="collnet" leaves no algorithm for AllReduce; available: TREE, RING`},
		{"per-collective section", map[string]string{"NCCL_ALGO": "ring;broadcast:tree"}, nil, kspace.Broadcast, 0, 0,
			`NCCL_ALGO="ring;broadcast:tree" leaves no algorithm for Broadcast; available: RING`},
		{"slim build without TREE", map[string]string{"NCCL_ALGO": "tree"}, slim(t, "AllReduce Sum f32 RING *"), kspace.AllReduce, kspace.Sum, kspace.F32,
			`NCCL_ALGO="tree" leaves no algorithm for AllReduce; available: RING`},
		{"slim build without LL128", map[string]string{"NCCL_PROTO": "LL128"}, slim(t, "AllReduce Sum f32 * (LL|SIMPLE)"), kspace.AllReduce, kspace.Sum, kspace.F32,
			`NCCL_PROTO="LL128" leaves no protocol for AllReduce Sum f32 (NCCL_ALGO unset); available: TREE/LL, TREE/SIMPLE, RING/LL, RING/SIMPLE`},
		{"filtered-out function", nil, slim(t, "AllReduce Sum f32 * *"), kspace.AllReduce, kspace.Prod, kspace.F64,
			`AllReduce Prod f64 has no implemented function in this build`},
		{"filtered-out collective", nil, slim(t, "AllReduce * * * *"), kspace.AllGather, 0, 0,
			`AllGather has no implemented function in this build`},
		{"SendRecv filtered out", nil, slim(t, "AllReduce * * * *"), kspace.SendRecv, 0, 0,
			`SendRecv is not in this build`},
		{"SendRecv without LL or SIMPLE", map[string]string{"NCCL_PROTO": "sendrecv:LL128"}, nil, kspace.SendRecv, 0, 0,
			`NCCL_PROTO="sendrecv:LL128" leaves no protocol for SendRecv; available: LL, SIMPLE`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tu := newTuner(t, h200(4), c.env, c.avail)
			_, err := tu.Choose(c.coll, c.op, c.ty, 1<<20)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
			assert.True(t, errors.Is(err, ErrNoChoice))
		})
	}
}

func TestSlimBuildChoosesWhatIsBuilt(t *testing.T) {
	tu := newTuner(t, h200(8), nil, slim(t, "AllReduce Sum f32 RING SIMPLE"))
	for _, b := range sizes {
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, b)
		require.NoError(t, err)
		assert.Equal(t, kspace.Ring, ch.Algo)
		assert.Equal(t, kspace.Simple, ch.Proto)
	}
	// Signed sums share the unsigned implementation.
	tu = newTuner(t, h200(8), nil, slim(t, "AllReduce Sum u32 * *"))
	_, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.I32, 8)
	require.NoError(t, err)
}

func TestUnimplementedAlgorithmsNeverChosen(t *testing.T) {
	// Even when allowed and "available", only RING and TREE are chosen,
	// and NVLS stays off.
	cfg := envConfig(t, map[string]string{"NCCL_ALGO": "nvls,collnetdirect,pat,ring"})
	tu, err := New(h200(8), cfg, nil)
	require.NoError(t, err)
	for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter} {
		for _, b := range sizes {
			ch, err := tu.Choose(coll, kspace.Sum, kspace.F32, b)
			require.NoError(t, err)
			assert.Equal(t, kspace.Ring, ch.Algo)
		}
	}
}

func TestSendRecv(t *testing.T) {
	tu := newTuner(t, h200(2), map[string]string{"NCCL_PROTO": "simple"}, nil)
	small, err := tu.Choose(kspace.SendRecv, 0, 0, 1024)
	require.NoError(t, err)
	assert.Equal(t, kspace.LL, small.Proto, "an unprefixed NCCL_PROTO does not steer SendRecv")
	assert.Equal(t, kspace.Algo(kspace.Unset), small.Algo)
	assert.Equal(t, kspace.SendRecvFunc, small.Func)
	large, err := tu.Choose(kspace.SendRecv, 0, 0, 64<<20)
	require.NoError(t, err)
	assert.Equal(t, kspace.Simple, large.Proto)
	assert.Contains(t, large.String(), "-/SIMPLE")

	tu = newTuner(t, h200(2), map[string]string{"NCCL_PROTO": "sendrecv:simple"}, nil)
	small, err = tu.Choose(kspace.SendRecv, 0, 0, 1024)
	require.NoError(t, err)
	assert.Equal(t, kspace.Simple, small.Proto)
}

func TestNThreads(t *testing.T) {
	tu := newTuner(t, h200(2), map[string]string{"NCCL_NTHREADS": "256", "NCCL_PROTO": "simple"}, nil)
	ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 256<<20)
	require.NoError(t, err)
	assert.Equal(t, 256, ch.NThreads)
	tu = newTuner(t, h200(2), map[string]string{"NCCL_PROTO": "LL128"}, nil)
	ch, err = tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, 256<<20)
	require.NoError(t, err)
	assert.Equal(t, config.MaxLL128NThreads, ch.NThreads)
}

func TestOneRank(t *testing.T) {
	tu := newTuner(t, h200(1), nil, nil)
	ch, err := tu.Choose(kspace.AllGather, 0, 0, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, kspace.Ring, ch.Algo)
	assert.Equal(t, kspace.Simple, ch.Proto)
	assert.Zero(t, ch.PredictedTime)
}

func TestBadInputs(t *testing.T) {
	cfg := config.Default()
	for _, c := range []struct {
		topo Topology
		msg  string
	}{
		{Topology{}, "NRanks=0"},
		{Topology{NRanks: 2, NNodes: 3, SMCount: 1, BlocksPerSM: 1, IntraBW: 1}, "NNodes=3 exceeds NRanks=2"},
		{Topology{NRanks: 2, RanksPerGPU: 3, SMCount: 1, BlocksPerSM: 1, IntraBW: 1}, "RanksPerGPU=3 exceeds NRanks=2"},
		{Topology{NRanks: 2, IntraBW: 1}, "SMCount=0 and BlocksPerSM=0"},
		{Topology{NRanks: 2, SMCount: 1, BlocksPerSM: 1}, "IntraBW=0"},
		{Topology{NRanks: 4, NNodes: 2, SMCount: 8, BlocksPerSM: 1, IntraBW: 1}, "InterBW=0 with 2 nodes"},
		{Topology{NRanks: 8, RanksPerGPU: 8, SMCount: 4, BlocksPerSM: 1, IntraBW: 1}, "8 ranks share one GPU but only 4 blocks (4 SMs × 1) can be resident at once"},
	} {
		_, err := New(c.topo, cfg, nil)
		require.Error(t, err, c.msg)
		assert.Contains(t, err.Error(), c.msg)
		assert.True(t, errors.Is(err, ErrTopology))
	}
	tu := newTuner(t, h200(2), nil, nil)
	_, err := tu.Choose(kspace.NumColls, 0, 0, 8)
	assert.Error(t, err)
	_, err = tu.Choose(kspace.AllReduce, kspace.NumRedOps, kspace.F32, 8)
	assert.Error(t, err)
	_, err = tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, -1)
	assert.Error(t, err)
}

func ExampleTuner_Choose() {
	cfg, _ := config.FromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{"NCCL_PROTO": "^LL128"}[k]
		return v, ok
	})
	tu, _ := New(Topology{NRanks: 8, RanksPerGPU: 8, SMCount: 132, BlocksPerSM: 1, IntraBW: 20}, cfg, nil)
	for _, n := range []int64{8, 256 << 20} {
		ch, _ := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F32, n)
		fmt.Println(n, ch.Algo, ch.Proto, ch.NChannels)
	}
	// Output:
	// 8 RING LL 1
	// 268435456 RING SIMPLE 16
}

// TestSharedGPUCalibration pins the choices that the shared-GPU caps
// changed, each the faster one on the H200 (see sharedBusBW): 8 ranks on
// one GPU ran AllReduce of 4 and 16 MiB in 80–101 and 190 µs with RING
// SIMPLE against 103 and 374 µs with the LL128 that NCCL's model picked,
// and AllGather of 16 MiB in 108 µs against 194.
func TestSharedGPUCalibration(t *testing.T) {
	eight := Topology{NRanks: 8, NNodes: 1, NGPUs: 1, RanksPerGPU: 8, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 16}
	tu, err := New(eight, config.Config{}, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		coll  kspace.Coll
		bytes int64
	}{{kspace.AllReduce, 4 << 20}, {kspace.AllReduce, 16 << 20}, {kspace.AllGather, 16 << 20}, {kspace.ReduceScatter, 16 << 20}} {
		ch, err := tu.Choose(tc.coll, kspace.Sum, kspace.F32, tc.bytes)
		require.NoError(t, err)
		assert.Equal(t, kspace.Ring, ch.Algo, "%s %d B", tc.coll, tc.bytes)
		assert.Equal(t, kspace.Simple, ch.Proto, "%s %d B", tc.coll, tc.bytes)
	}
	// One rank per GPU: NCCL's model, untouched by the caps.
	spread := eight
	spread.RanksPerGPU, spread.NGPUs = 1, 8
	tu1, err := New(spread, config.Config{}, nil)
	require.NoError(t, err)
	tu8, err := New(eight, config.Config{}, nil)
	require.NoError(t, err)
	assert.Equal(t, tu1.ncclBandwidth(kspace.AllReduce, kspace.Ring, kspace.LL128, 16, 16<<20),
		tu1.bandwidth(kspace.AllReduce, kspace.Ring, kspace.LL128, 16, 16<<20))
	assert.Less(t, tu8.bandwidth(kspace.AllReduce, kspace.Ring, kspace.LL128, 16, 16<<20),
		tu8.ncclBandwidth(kspace.AllReduce, kspace.Ring, kspace.LL128, 16, 16<<20))
}

func TestSlimBuildNamesWhatIsMissing(t *testing.T) {
	errMissing := errors.New("kernels: function not built")
	avail := slim(t, "AllReduce Sum (f32|bf16) * *")
	why := func(f kspace.Func) error {
		if avail(f) {
			return nil
		}
		return fmt.Errorf("%w: %v is not in this kernel set", errMissing, f)
	}
	tu, err := New(h200(2), config.Config{}, avail, WithUnavailable(why))
	require.NoError(t, err, "a slim build never fails New")
	for _, ty := range []kspace.Type{kspace.F32, kspace.BF16} {
		for _, b := range sizes {
			ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, ty, b)
			require.NoError(t, err)
			assert.True(t, avail(ch.Func), "chose %v, which the set lacks", ch.Func)
		}
	}
	_, err = tu.Choose(kspace.AllGather, 0, 0, 1<<20)
	require.ErrorIs(t, err, ErrNoChoice)
	require.ErrorIs(t, err, errMissing)
	assert.Contains(t, err.Error(), "AllGather RING LL is not in this kernel set")
	_, err = tu.Choose(kspace.SendRecv, 0, 0, 8)
	require.ErrorIs(t, err, errMissing)
	assert.Contains(t, err.Error(), "SendRecv is not in this kernel set")
	_, err = tu.Choose(kspace.AllReduce, kspace.Sum, kspace.F16, 8)
	require.ErrorIs(t, err, errMissing)
}
