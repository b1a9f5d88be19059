package topo

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

func TestLayoutOneGPU(t *testing.T) {
	l := NewLayout([]int{0, 0, 0, 0, 0, 0, 0, 0})
	assert.Equal(t, 8, l.NRanks)
	assert.Equal(t, 1, l.NGPUs)
	assert.Equal(t, 8, l.RanksPerGPU)
	assert.Equal(t, []int{0}, l.Ordinals)
	assert.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}, l.Ranks)
	assert.True(t, l.SameGPU(0, 7))
	assert.Equal(t, LinkSame, l.LinkBetween(0, 0))
	assert.Equal(t, "8 ranks on 1 GPU (up to 8 per GPU)", l.String())
	calls := 0
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) { calls++; return true, nil }))
	assert.Zero(t, calls, "one GPU needs no peer queries")
}

func TestLayoutUnevenSparse(t *testing.T) {
	// Ranks on devices 3, 1, 3, 5, 1, 3: ordinals sorted, ranks grouped.
	l := NewLayout([]int{3, 1, 3, 5, 1, 3})
	assert.Equal(t, 3, l.NGPUs)
	assert.Equal(t, []int{1, 3, 5}, l.Ordinals)
	assert.Equal(t, [][]int{{1, 4}, {0, 2, 5}, {3}}, l.Ranks)
	assert.Equal(t, []int{1, 0, 1, 2, 0, 1}, l.GPUOf)
	assert.Equal(t, 3, l.RanksPerGPU)
	assert.False(t, l.SameGPU(0, 1))
	assert.Equal(t, "6 ranks on 3 GPUs (up to 3 per GPU)", l.String())

	devs := []int{0, 1}
	l2 := NewLayout(devs)
	devs[0] = 9
	assert.Equal(t, []int{0, 1}, l2.Device, "the layout keeps its own copy")
}

func TestLayoutEmpty(t *testing.T) {
	l := NewLayout(nil)
	assert.Zero(t, l.NGPUs)
	assert.Zero(t, l.RanksPerGPU)
}

func TestProbePeers(t *testing.T) {
	l := NewLayout([]int{0, 1, 2})
	assert.Equal(t, LinkUnknown, l.LinkBetween(0, 1))
	assert.True(t, l.Connected(0, 1), "unknown counts as connected")

	// 0<->1 peers; 2 reaches 0 but not the other way.
	require.NoError(t, l.ProbePeers(func(a, b int) (bool, error) {
		return (a == 0 && b == 1) || (a == 1 && b == 0) || (a == 2 && b == 0), nil
	}))
	assert.Equal(t, LinkPeer, l.LinkBetween(0, 1))
	assert.Equal(t, LinkNone, l.LinkBetween(1, 2))
	assert.Equal(t, LinkPeer, l.LinkBetween(2, 0))
	assert.True(t, l.Connected(0, 1))
	assert.False(t, l.Connected(0, 2), "needs both directions")
	assert.Equal(t, "peer", LinkPeer.String())

	boom := errors.New("boom")
	err := l.ProbePeers(func(a, b int) (bool, error) { return false, boom })
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "device 0 to 1")
}

func TestProbeNVLinks(t *testing.T) {
	l := NewLayout([]int{0, 1, 1})
	bus := []string{"0000:19:00.0", "0000:3B:00.0"}
	// NVML spells bus ids with an 8-digit domain; GPU 0 has 2 links to GPU
	// 1 and 1 to a switch; GPU 1 has 2 back.
	remotes := map[string][]string{
		"0000:19:00.0": {"00000000:3B:00.0", "00000000:3b:00.0", "00000000:C0:00.0"},
		"0000:3B:00.0": {"00000000:19:00.0", "00000000:19:00.0"},
	}
	require.NoError(t, l.ProbeNVLinks(bus, func(b string) ([]string, error) { return remotes[b], nil }))
	assert.Equal(t, [][]int{{0, 2}, {2, 0}}, l.NVLinks)
	assert.Equal(t, []int{1, 0}, l.SwitchLinks)

	err := l.ProbeNVLinks(bus, func(string) ([]string, error) { return nil, ErrNoNVML })
	assert.ErrorIs(t, err, ErrNoNVML)
	assert.Equal(t, [][]int{{-1, -1}, {-1, -1}}, l.NVLinks, "failure leaves counts unknown")
	assert.Equal(t, []int{-1, -1}, l.SwitchLinks)

	assert.Error(t, l.ProbeNVLinks(bus[:1], NVML))
}

func TestNormalizeBusID(t *testing.T) {
	assert.Equal(t, "0000:3b:00.0", NormalizeBusID("00000000:3B:00.0"))
	assert.Equal(t, "0000:3b:00.0", NormalizeBusID("0000:3b:00.0\x00\x00"))
	assert.Equal(t, "0001:3b:00.0", NormalizeBusID("1:3b:00.0"))
	assert.Equal(t, "weird", NormalizeBusID("WEIRD"))
}

func TestGPUString(t *testing.T) {
	g := GPU{Ordinal: 2, SMCount: 132, CCMajor: 9, CCMinor: 0, BusID: "0000:19:00.0"}
	assert.Equal(t, 900, g.Arch())
	assert.Equal(t, "GPU 2 (sm_90, 132 SMs, bus 0000:19:00.0)", g.String())
}

func TestDescribeGPU(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	if n == 0 {
		t.Skip("no CUDA device")
	}
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	g, err := Describe(dev)
	require.NoError(t, err)
	t.Logf("%v: %d threads/SM, %d B shared/SM", g, g.MaxThreadsPerSM, g.MaxSharedPerSM)
	assert.Positive(t, g.SMCount)
	assert.GreaterOrEqual(t, g.CCMajor, 6)
	assert.NotEmpty(t, g.BusID)
	assert.Positive(t, g.MaxThreadsPerSM)
	assert.Positive(t, g.MaxSharedPerSM)

	ords := make([]int, n)
	for i := range ords {
		ords[i] = i
	}
	l := NewLayout(ords)
	require.NoError(t, l.ProbePeers(CUDAPeers))
	bus := make([]string, n)
	for i := range n {
		d, err := cuda.GetDevice(i)
		require.NoError(t, err)
		bus[i], err = d.PCIBusIDString()
		require.NoError(t, err)
	}
	if err := l.ProbeNVLinks(bus, NVML); err != nil {
		t.Logf("NVLinks unknown: %v", err)
	}
	t.Logf("%v peers=%v nvlinks=%v switch=%v", l, l.Peer, l.NVLinks, l.SwitchLinks)
}
