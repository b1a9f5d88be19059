package tests

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The suite's algorithm/protocol configurations come from the kernel-space
// model, not from a list of their own: every algorithm that kspace says is
// implemented (kspace.Implemented) for a collective the API calls, with
// every protocol that has a valid function of that algorithm
// (kspace.Requirements), gives one configuration. A new algorithm, or a
// collective an algorithm newly implements, enters TestCollectives,
// TestHugeCollectives and TestGraphReplay without an edit here;
// TestDerivedConfigs fails if one is left out.
//
// Whether a configuration runs on a world of this suite (every rank in this
// process) is a second rule, configApplies.

// suiteColls are the collectives the API calls, in the order the suite
// runs them. AllGatherV has functions but no call: the enqueuer refuses it
// (runtime/enqueue's validate), so nothing can run it.
var suiteColls = []kspace.Coll{kspace.AllReduce, kspace.ReduceScatter, kspace.Reduce, kspace.AllGather, kspace.Broadcast}

// config1 is one configuration: algo forced (NCCL_ALGO) for the collectives
// it implements, every collective under protocol proto (NCCL_PROTO).
type config1 struct {
	algo  kspace.Algo
	proto kspace.Proto
	// colls are the suite's collectives that algo implements with proto,
	// in suiteColls order: the ones the configuration runs.
	colls []kspace.Coll
}

// configs are the suite's configurations (deriveConfigs).
var configs = deriveConfigs()

// deriveConfigs lists, from the model, one configuration per implemented
// algorithm and protocol: RING first (it runs every collective), then the
// others in kspace order, protocols in kspace order.
func deriveConfigs() []config1 {
	var out []config1
	index := map[[2]int]int{}
	for _, f := range kspace.Rows() {
		if f.Kind != kspace.Ordinary || !slices.Contains(suiteColls, f.Coll) || !kspace.Implemented(f.Coll, f.Algo) {
			continue
		}
		if _, _, ok := kspace.Requirements(f); !ok {
			continue
		}
		k := [2]int{int(f.Algo), int(f.Proto)}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, config1{algo: f.Algo, proto: f.Proto})
		}
		if !slices.Contains(out[i].colls, f.Coll) {
			out[i].colls = append(out[i].colls, f.Coll)
		}
	}
	for i := range out {
		slices.SortFunc(out[i].colls, func(a, b kspace.Coll) int {
			return slices.Index(suiteColls, a) - slices.Index(suiteColls, b)
		})
	}
	rank := func(a kspace.Algo) int {
		if a == kspace.Ring {
			return -1
		}
		return int(a)
	}
	slices.SortFunc(out, func(a, b config1) int {
		if d := rank(a.algo) - rank(b.algo); d != 0 {
			return d
		}
		return int(a.proto) - int(b.proto)
	})
	return out
}

// name is the configuration's subtest name: "ring/LL", "direct/SIMPLE".
func (c config1) name() string { return strings.ToLower(c.algo.String()) + "/" + c.proto.String() }

// every reports whether the configuration runs every collective of the
// suite (RING).
func (c config1) every() bool { return len(c.colls) == len(suiteColls) }

// runs reports whether the configuration runs coll.
func (c config1) runs(coll kspace.Coll) bool { return slices.Contains(c.colls, coll) }

// algoEnv is the NCCL_ALGO value that forces the configuration's algorithm
// for its collectives and leaves the others alone: "ring", or one section
// per collective, "allgather:pat;reducescatter:pat".
func (c config1) algoEnv() string {
	a := strings.ToLower(c.algo.String())
	if c.every() {
		return a
	}
	s := make([]string, len(c.colls))
	for i, coll := range c.colls {
		s[i] = strings.ToLower(coll.String()) + ":" + a
	}
	return strings.Join(s, ";")
}

// protoEnv is the NCCL_PROTO value.
func (c config1) protoEnv() string { return c.proto.String() }

// configApplies says why cfg cannot run on a world of this suite, whose
// ranks all live in this process and on one host, placed on devs (rank r
// on devs[r]); "" when it runs. peer reports whether device a can load
// device b's memory.
//
//   - PAT needs one rank per host (runtime/tune's patApplies): here every
//     rank is on one host, and one rank's calls are copies that run no PAT
//     kernel. tests/multiprocess_test.go runs it across fake hosts
//     (NCCLGO_MP_HOSTS with NCCL_ALGO=PAT).
//   - DIRECT needs 2 to generated.DirectMaxRanks ranks that load each
//     other's memory: every pair on one GPU or with peer access, and
//     NCCL_P2P_DISABLE unset across GPUs (runtime/comm's directEligible;
//     the tuner refuses it elsewhere, so forcing it would fail every call).
func configApplies(cfg config1, devs []int, p2pDisable bool, peer func(a, b int) bool) string {
	n := len(devs)
	switch cfg.algo {
	case kspace.PAT:
		return "PAT needs one rank per host and every rank of this world is on one host; " +
			"TestMultiProcess runs it across fake hosts (NCCLGO_MP_HOSTS=N NCCL_ALGO=PAT)"
	case kspace.Direct:
		switch {
		case n < 2:
			return "DIRECT needs 2 ranks or more (one rank's calls are copies)"
		case n > generated.DirectMaxRanks:
			return fmt.Sprintf("DIRECT runs on at most %d ranks, not %d", generated.DirectMaxRanks, n)
		}
		several := slices.ContainsFunc(devs, func(d int) bool { return d != devs[0] })
		if several && p2pDisable {
			return "DIRECT across GPUs needs peer access and NCCL_P2P_DISABLE is set"
		}
		for _, a := range devs {
			for _, b := range devs {
				if a != b && !peer(a, b) {
					return fmt.Sprintf("DIRECT needs every pair of GPUs to have peer access; device %d cannot reach device %d", a, b)
				}
			}
		}
	default: // RING and TREE run on any world of this suite
	}
	return ""
}

// skipUnlessApplies skips t when cfg cannot run on n ranks placed as the
// suite places them (NCCLGO_TEST_DEVICES).
func skipUnlessApplies(t *testing.T, cfg config1, n int) {
	t.Helper()
	p2pDisable := false
	if v := os.Getenv("NCCL_P2P_DISABLE"); v != "" && v != "0" {
		p2pDisable = true
	}
	if why := configApplies(cfg, rankDevices(testDevices(t), n), p2pDisable, peerAccess); why != "" {
		t.Skip(why)
	}
}

// peerAccess reports whether device a can access device b's memory.
func peerAccess(a, b int) bool {
	da, err := cuda.GetDevice(a)
	if err != nil {
		return false
	}
	db, err := cuda.GetDevice(b)
	if err != nil {
		return false
	}
	ok, err := da.CanAccessPeer(db)
	return err == nil && ok
}

// TestDerivedConfigs checks the configurations against the model: every
// implemented algorithm and protocol of every collective the API calls is
// in a configuration, no configuration holds anything else, each NCCL_ALGO
// value forces exactly its algorithm for its collectives, and the rule of
// what runs in one process. CPU only.
func TestDerivedConfigs(t *testing.T) {
	require.NotEmpty(t, configs)
	type key struct {
		a kspace.Algo
		p kspace.Proto
		c kspace.Coll
	}
	want := map[key]bool{}
	for _, f := range kspace.Rows() {
		if f.Kind != kspace.Ordinary || f.Coll == kspace.SendRecv || !kspace.Implemented(f.Coll, f.Algo) {
			continue
		}
		if _, _, ok := kspace.Requirements(f); !ok {
			continue
		}
		if f.Coll == kspace.AllGatherV {
			continue // no call (suiteColls)
		}
		want[key{f.Algo, f.Proto, f.Coll}] = true
	}
	got := map[key]bool{}
	seen := map[string]bool{}
	for _, cfg := range configs {
		assert.False(t, seen[cfg.name()], "configuration %s listed twice", cfg.name())
		seen[cfg.name()] = true
		require.NotEmpty(t, cfg.colls, "%s runs no collective", cfg.name())
		t.Logf("%-14s NCCL_ALGO=%-34q NCCL_PROTO=%-8q %v", cfg.name(), cfg.algoEnv(), cfg.protoEnv(), cfg.colls)
		for _, c := range cfg.colls {
			got[key{cfg.algo, cfg.proto, c}] = true
		}
	}
	for k := range want {
		assert.True(t, got[k], "%s %s/%s is implemented but no configuration runs it", k.c, k.a, k.p)
	}
	for k := range got {
		assert.True(t, want[k], "a configuration runs %s %s/%s, which the model does not implement", k.c, k.a, k.p)
	}

	// Every collective with functions has a call, but AllGatherV.
	for c := kspace.Coll(0); c < kspace.NumColls; c++ {
		if c == kspace.SendRecv || c == kspace.AllGatherV {
			continue
		}
		assert.Contains(t, suiteColls, c, "%s has functions: the suite must call it", c)
	}

	// What the model says today, so that a change in it shows here too.
	for _, k := range []key{
		{kspace.Ring, kspace.LL, kspace.Broadcast}, {kspace.Ring, kspace.LL128, kspace.Reduce}, {kspace.Ring, kspace.Simple, kspace.AllGather},
		{kspace.Tree, kspace.LL, kspace.AllReduce}, {kspace.Tree, kspace.LL128, kspace.AllReduce}, {kspace.Tree, kspace.Simple, kspace.AllReduce},
		{kspace.PAT, kspace.Simple, kspace.AllGather}, {kspace.PAT, kspace.Simple, kspace.ReduceScatter},
		{kspace.Direct, kspace.Simple, kspace.AllReduce},
	} {
		assert.True(t, got[k], "%s %s/%s", k.c, k.a, k.p)
	}
	for _, k := range []key{{kspace.Direct, kspace.LL, kspace.AllReduce}, {kspace.PAT, kspace.LL, kspace.AllGather}, {kspace.Tree, kspace.Simple, kspace.Broadcast}} {
		assert.False(t, got[k], "%s %s/%s has no valid function", k.c, k.a, k.p)
	}
	assert.Equal(t, "ring/LL", configs[0].name(), "RING first")

	// Each NCCL_ALGO value forces the algorithm for the configuration's
	// collectives, and leaves the other collectives alone.
	for _, cfg := range configs {
		sel, err := config.ParseAlgoSelection(cfg.algoEnv())
		require.NoError(t, err, "%s: NCCL_ALGO=%q", cfg.name(), cfg.algoEnv())
		for _, c := range suiteColls {
			for a := kspace.Algo(0); a < kspace.NumAlgos; a++ {
				wantAllowed := a == cfg.algo || !cfg.runs(c)
				assert.Equal(t, wantAllowed, sel.Allows(c, a), "%s: NCCL_ALGO=%q allows %s for %s", cfg.name(), cfg.algoEnv(), a, c)
			}
		}
		_, err = config.ParseProtoSelection(cfg.protoEnv())
		require.NoError(t, err, "%s: NCCL_PROTO=%q", cfg.name(), cfg.protoEnv())
	}
}

// TestConfigApplies checks the rule of which configurations run in one
// process. CPU only.
func TestConfigApplies(t *testing.T) {
	byAlgo := func(a kspace.Algo) config1 {
		i := slices.IndexFunc(configs, func(c config1) bool { return c.algo == a })
		require.GreaterOrEqual(t, i, 0, "no %s configuration", a)
		return configs[i]
	}
	all := func(int, int) bool { return true }
	none := func(int, int) bool { return false }
	for _, n := range []int{1, 2, 4, 8} {
		devs := make([]int, n)
		assert.Empty(t, configApplies(byAlgo(kspace.Ring), devs, false, none), "RING on %d ranks", n)
		assert.Empty(t, configApplies(byAlgo(kspace.Tree), devs, false, none), "TREE on %d ranks", n)
		assert.Contains(t, configApplies(byAlgo(kspace.PAT), devs, false, all), "one rank per host", "PAT on %d ranks", n)
	}
	direct := byAlgo(kspace.Direct)
	assert.Contains(t, configApplies(direct, []int{0}, false, all), "2 ranks or more")
	assert.Empty(t, configApplies(direct, []int{0, 0}, false, none), "one GPU: no peer access needed")
	assert.Empty(t, configApplies(direct, []int{0, 0, 0, 0}, true, none), "one GPU: NCCL_P2P_DISABLE does not matter")
	assert.Empty(t, configApplies(direct, []int{0, 1, 2, 3}, false, all))
	assert.Contains(t, configApplies(direct, []int{0, 1}, false, none), "device 0 cannot reach device 1")
	assert.Contains(t, configApplies(direct, []int{0, 1}, true, all), "NCCL_P2P_DISABLE")
	assert.Contains(t, configApplies(direct, make([]int, generated.DirectMaxRanks+1), false, all), "at most")
}
