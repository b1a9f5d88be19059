package comm

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// TestAgreeResidency: ranks on GPUs of different sizes end up with the
// same residency numbers, hence the same channel count.
func TestAgreeResidency(t *testing.T) {
	nets := bootstrap.NewInProcess(3)
	defer func() {
		for _, n := range nets {
			n.Close()
		}
	}()
	sms := []int{132, 132, 78}
	bps := []int{1, 2, 1}
	got := make([]agreedShare, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			a, err := agreeResidency(context.Background(), nets[r], shareView{PID: 1, Host: "h", GPU: "0", SMs: sms[r], BlocksPerSM: bps[r]})
			assert.NoError(t, err)
			got[r] = a
		})
	}
	wg.Wait()
	l := topo.NewLayout([]int{0, 0, 0})
	var chans []int
	for r := range 3 {
		require.Equal(t, 78, got[r].SMs, "rank %d", r)
		require.Equal(t, 1, got[r].BlocksPerSM, "rank %d", r)
		require.Equal(t, 3, got[r].RanksPerGPU, "rank %d", r)
		gpu := h200GPU
		gpu.SMCount = got[r].SMs
		tp := tuneTopology(l, gpu, got[r].BlocksPerSM, config.Config{})
		tp.RanksPerGPU = got[r].RanksPerGPU
		tu, err := tune.New(tp, config.Config{}, nil)
		require.NoError(t, err)
		chans = append(chans, tu.MaxChannels())
	}
	assert.Equal(t, []int{26, 26, 26}, chans, "78 SMs / 3 ranks per GPU, on every rank")
}

// TestAgreeResidencyRejectsBadViews: a peer's malformed or empty share is
// an error naming the rank.
func TestAgreeResidencyRejectsBadViews(t *testing.T) {
	nets := bootstrap.NewInProcess(2)
	defer func() {
		for _, n := range nets {
			n.Close()
		}
	}()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			_, errs[r] = agreeResidency(context.Background(), nets[r], shareView{PID: r, Host: "h", GPU: "0", SMs: 132 * (1 - r), BlocksPerSM: 1})
		})
	}
	wg.Wait()
	for r := range 2 {
		require.Error(t, errs[r])
		assert.Contains(t, errs[r].Error(), "rank 1's SM share")
	}
}

// TestAgreeTuning: a rank whose NVLink probe answered differently (PCI
// where its peers saw NVLink) would choose another algorithm for the same
// call — the two-GPU hang — so every rank tunes with rank 0's topology;
// settings that differ between ranks are an error on every rank.
func TestAgreeTuning(t *testing.T) {
	cfg, err := config.FromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{"NCCL_PROTO": "SIMPLE"}[k]
		return v, ok
	})
	require.NoError(t, err)
	l := topo.NewLayout([]int{0, 0, 1})
	base := tuneTopology(l, h200GPU, 1, cfg)
	pci := base
	pci.IntraLink = tune.LinkPCI
	choose := func(tp tune.Topology) tune.Choice {
		tu, err := tune.New(tp, cfg, nil)
		require.NoError(t, err)
		ch, err := tu.Choose(kspace.AllReduce, kspace.Sum, kspace.I32, 12)
		require.NoError(t, err)
		return ch
	}
	require.NotEqual(t, choose(base).Func, choose(pci).Func,
		"the premise: the link type alone changes the choice for issue 15's AllReduce of 3 int32")

	run := func(inputs []tuningInputs) ([]tune.Topology, []bool, []error) {
		nets := bootstrap.NewInProcess(len(inputs))
		defer func() {
			for _, n := range nets {
				n.Close()
			}
		}()
		tps, changed, errs := make([]tune.Topology, len(inputs)), make([]bool, len(inputs)), make([]error, len(inputs))
		var wg sync.WaitGroup
		for r := range inputs {
			wg.Go(func() { tps[r], changed[r], errs[r] = agreeTuning(context.Background(), nets[r], inputs[r]) })
		}
		wg.Wait()
		return tps, changed, errs
	}
	set := settingsOf(cfg, 2, "")
	tps, changed, errs := run([]tuningInputs{{base, set}, {pci, set}, {base, set}})
	for r := range tps {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, base, tps[r], "rank %d tunes with rank 0's topology", r)
		assert.Equal(t, choose(base), choose(tps[r]), "rank %d chooses as rank 0", r)
	}
	assert.Equal(t, []bool{false, true, false}, changed)

	other := set
	other.Proto = "LL"
	_, _, errs = run([]tuningInputs{{base, set}, {base, set}, {base, other}})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrInvalidUsage, "rank %d", r)
		assert.Contains(t, err.Error(), "rank 2 has", "rank %d's error names the rank that differs", r)
		assert.Contains(t, err.Error(), "Proto:LL", "rank %d's error shows the value", r)
	}
	// NCCL_LL128_NTHREADS and NCCLGO_NET_BUFFSIZE steer the channels and
	// the steps as the other settings do: a difference is refused too.
	for _, differ := range []func(*tuningSettings){
		func(s *tuningSettings) { s.LL128NThreads = 320 },
		func(s *tuningSettings) { s.NetBuffSize = 16 << 20 },
	} {
		other := set
		differ(&other)
		_, _, errs = run([]tuningInputs{{base, other}, {base, set}, {base, set}})
		for r, err := range errs {
			require.ErrorIs(t, err, ErrInvalidUsage, "rank %d: %+v", r, other)
		}
	}
}
