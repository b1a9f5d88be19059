package ncclgo

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	got := make([][2]int, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			s, b, err := agreeResidency(context.Background(), nets[r], sms[r], bps[r])
			assert.NoError(t, err)
			got[r] = [2]int{s, b}
		})
	}
	wg.Wait()
	l := topo.NewLayout([]int{0, 0, 0, 1, 1, 2})
	var chans []int
	for r := range 3 {
		require.Equal(t, [2]int{78, 1}, got[r], "rank %d", r)
		gpu := h200GPU
		gpu.SMCount = got[r][0]
		tu, err := tune.New(tuneTopology(l, gpu, got[r][1], config.Config{}), config.Config{}, nil)
		require.NoError(t, err)
		chans = append(chans, tu.MaxChannels())
	}
	assert.Equal(t, []int{26, 26, 26}, chans, "78 SMs / 3 ranks per GPU, on every rank")
}
