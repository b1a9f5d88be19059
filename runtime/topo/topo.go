// Package topo describes what the host needs to know about its GPUs: each
// device's resources (SMs, compute capability, PCI bus id) and how the ranks
// of a communicator are laid out on them (which ranks share a GPU, which
// GPUs can reach each other's memory directly).
//
// The Layout is pure data and is built and tested without CUDA; Describe and
// CUDAPeers query the driver through runtime/cuda.
package topo

import (
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// GPU is one device as the host sees it.
type GPU struct {
	// Ordinal is the CUDA device ordinal.
	Ordinal int
	// SMCount is the number of streaming multiprocessors.
	SMCount int
	// CCMajor and CCMinor are the compute capability (9 and 0 for sm_90).
	CCMajor, CCMinor int
	// BusID is the PCI bus id ("0000:19:00.0").
	BusID string
	// MaxThreadsPerSM is the most resident threads of one SM.
	MaxThreadsPerSM int
	// MaxSharedPerSM is the shared memory of one SM, in bytes.
	MaxSharedPerSM int
}

// Arch is the compute capability as __CUDA_ARCH__ writes it (900 for sm_90),
// the unit of kspace.Req.Arch.
func (g GPU) Arch() int { return g.CCMajor*100 + g.CCMinor*10 }

func (g GPU) String() string {
	return fmt.Sprintf("GPU %d (sm_%d%d, %d SMs, bus %s)", g.Ordinal, g.CCMajor, g.CCMinor, g.SMCount, g.BusID)
}

// Describe queries dev's properties from the driver.
func Describe(dev cuda.Device) (GPU, error) {
	g := GPU{Ordinal: int(dev)}
	attrs := []struct {
		a   cuda.DeviceAttribute
		dst *int
	}{
		{cuda.DevAttrMultiprocessorCount, &g.SMCount},
		{cuda.DevAttrComputeCapabilityMajor, &g.CCMajor},
		{cuda.DevAttrComputeCapabilityMinor, &g.CCMinor},
		{cuda.DevAttrMaxThreadsPerMultiprocessor, &g.MaxThreadsPerSM},
		{cuda.DevAttrMaxSharedMemoryPerMultiprocessor, &g.MaxSharedPerSM},
	}
	for _, x := range attrs {
		v, err := dev.Attribute(x.a)
		if err != nil {
			return GPU{}, fmt.Errorf("topo: describing device %d: %w", int(dev), err)
		}
		*x.dst = v
	}
	bus, err := dev.PCIBusIDString()
	if err != nil {
		return GPU{}, fmt.Errorf("topo: describing device %d: %w", int(dev), err)
	}
	g.BusID = bus
	return g, nil
}

// PeerFunc reports whether device ordinal a can access device ordinal b's
// memory directly. CUDAPeers asks the driver; tests pass a stub.
type PeerFunc func(a, b int) (bool, error)

// CUDAPeers is the PeerFunc that asks the driver (cuDeviceCanAccessPeer).
func CUDAPeers(a, b int) (bool, error) {
	da, err := cuda.GetDevice(a)
	if err != nil {
		return false, err
	}
	db, err := cuda.GetDevice(b)
	if err != nil {
		return false, err
	}
	return da.CanAccessPeer(db)
}

// Link is what is known about the connection between two GPUs.
type Link int

// The kinds of Link. LinkUnknown is the zero value: nothing was probed.
const (
	LinkUnknown Link = iota
	LinkNone         // no direct access: data goes through host memory
	LinkPeer         // peer access (PCIe or NVLink, not told apart)
	LinkSame         // the same GPU
)

var linkNames = [...]string{"unknown", "none", "peer", "same"}

func (l Link) String() string { return linkNames[l] }

// Layout is how the ranks of a communicator sit on the GPUs of one node.
// GPUs are indexed 0..NGPUs-1 in ascending order of their device ordinal.
type Layout struct {
	// NRanks is the number of ranks.
	NRanks int
	// Device gives each rank's device ordinal.
	Device []int
	// Ordinals lists the distinct device ordinals, ascending; GPU index i is
	// device Ordinals[i].
	Ordinals []int
	// GPUOf gives each rank's GPU index.
	GPUOf []int
	// Ranks lists, per GPU index, the ranks on that GPU, ascending.
	Ranks [][]int
	// NGPUs is the number of distinct GPUs.
	NGPUs int
	// RanksPerGPU is the most ranks that share one GPU.
	RanksPerGPU int
	// Peer is the peer-access matrix between GPU indices (Peer[i][j] is
	// LinkSame on the diagonal). It is nil until ProbePeers fills it, and
	// nil means unknown: ring search then treats every pair as connected.
	Peer [][]Link
	// NVLinks counts the active NVLinks between GPU indices; -1 where
	// unknown. Nil until ProbeNVLinks fills it.
	NVLinks [][]int
	// SwitchLinks counts, per GPU index, the active NVLinks that end at a
	// device outside the layout (an NVSwitch); -1 where unknown.
	SwitchLinks []int
}

// NewLayout builds the layout of ranks whose device ordinals are devs
// (devs[r] is rank r's device).
func NewLayout(devs []int) Layout {
	l := Layout{NRanks: len(devs), Device: slices.Clone(devs)}
	l.Ordinals = slices.Clone(devs)
	slices.Sort(l.Ordinals)
	l.Ordinals = slices.Compact(l.Ordinals)
	l.NGPUs = len(l.Ordinals)
	l.Ranks = make([][]int, l.NGPUs)
	l.GPUOf = make([]int, len(devs))
	for r, d := range devs {
		g, _ := slices.BinarySearch(l.Ordinals, d)
		l.GPUOf[r] = g
		l.Ranks[g] = append(l.Ranks[g], r)
		l.RanksPerGPU = max(l.RanksPerGPU, len(l.Ranks[g]))
	}
	return l
}

// SameGPU reports whether ranks a and b run on the same device.
func (l Layout) SameGPU(a, b int) bool { return l.Device[a] == l.Device[b] }

// ProbePeers fills l.Peer by asking peers about every ordered pair of
// distinct GPUs. A single-GPU layout needs no calls.
func (l *Layout) ProbePeers(peers PeerFunc) error {
	m := make([][]Link, l.NGPUs)
	for i := range m {
		m[i] = make([]Link, l.NGPUs)
		for j := range m[i] {
			if i == j {
				m[i][j] = LinkSame
				continue
			}
			ok, err := peers(l.Ordinals[i], l.Ordinals[j])
			if err != nil {
				return fmt.Errorf("topo: peer access from device %d to %d: %w", l.Ordinals[i], l.Ordinals[j], err)
			}
			m[i][j] = LinkNone
			if ok {
				m[i][j] = LinkPeer
			}
		}
	}
	l.Peer = m
	return nil
}

// LinkBetween reports what connects GPU indices i and j (LinkUnknown when
// the matrix was not probed).
func (l Layout) LinkBetween(i, j int) Link {
	if i == j {
		return LinkSame
	}
	if l.Peer == nil {
		return LinkUnknown
	}
	return l.Peer[i][j]
}

// Connected reports whether GPU indices i and j can exchange data directly
// in both directions, counting unknown as connected.
func (l Layout) Connected(i, j int) bool {
	ok := func(k Link) bool { return k != LinkNone }
	return ok(l.LinkBetween(i, j)) && ok(l.LinkBetween(j, i))
}

// String summarizes the layout ("8 ranks on 1 GPU (8 per GPU)").
func (l Layout) String() string {
	gpus := "GPUs"
	if l.NGPUs == 1 {
		gpus = "GPU"
	}
	return fmt.Sprintf("%d ranks on %d %s (up to %d per GPU)", l.NRanks, l.NGPUs, gpus, l.RanksPerGPU)
}
