package topo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoNVML reports that NVML could not be used (not compiled in, library
// missing, or a query failed); NVLink counts are then unknown.
var ErrNoNVML = errors.New("topo: NVML is not available")

// NVLinkFunc returns the PCI bus id of the far end of each active NVLink
// of the GPU with PCI bus id busID. A far end that is not a GPU of the
// layout (an NVSwitch) counts as a switch link.
type NVLinkFunc func(busID string) (remotes []string, err error)

// NVML is the NVLinkFunc backed by NVML, which it loads with dlopen
// (libnvidia-ml.so.1) at its first call, not at link time: a host without
// NVML, and a client linking against the c-shared libnccl.so.2, never
// need its symbols. Without the library it returns an error wrapping
// ErrNoNVML.
var NVML NVLinkFunc = nvmlLinks

// ProbeNVLinks fills l.NVLinks and l.SwitchLinks from fn, given the PCI bus
// id of each GPU index (busIDs[i] for device l.Ordinals[i]). When fn fails
// for any GPU, every count is left unknown (-1) and the error is returned
// for the caller to log; nothing depends on NVLink counts being known.
func (l *Layout) ProbeNVLinks(busIDs []string, fn NVLinkFunc) error {
	if len(busIDs) != l.NGPUs {
		return fmt.Errorf("topo: ProbeNVLinks: %d bus ids for %d GPUs", len(busIDs), l.NGPUs)
	}
	unknown := func() {
		l.NVLinks = make([][]int, l.NGPUs)
		l.SwitchLinks = make([]int, l.NGPUs)
		for i := range l.NVLinks {
			l.NVLinks[i] = make([]int, l.NGPUs)
			for j := range l.NVLinks[i] {
				l.NVLinks[i][j] = -1
			}
			l.SwitchLinks[i] = -1
		}
	}
	index := make(map[string]int, l.NGPUs)
	for i, b := range busIDs {
		index[NormalizeBusID(b)] = i
	}
	links := make([][]int, l.NGPUs)
	sw := make([]int, l.NGPUs)
	for i, b := range busIDs {
		remotes, err := fn(b)
		if err != nil {
			unknown()
			return fmt.Errorf("topo: NVLinks of GPU %s: %w", b, err)
		}
		links[i] = make([]int, l.NGPUs)
		for _, r := range remotes {
			if j, ok := index[NormalizeBusID(r)]; ok && j != i {
				links[i][j]++
			} else {
				sw[i]++
			}
		}
	}
	l.NVLinks, l.SwitchLinks = links, sw
	return nil
}

// NormalizeBusID puts a PCI bus id in one spelling, so that CUDA's
// "0000:19:00.0" and NVML's "00000000:19:00.0" compare equal: lower case,
// a 4-digit domain. Strings that do not parse are only lower-cased.
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimRight(strings.TrimSpace(s), "\x00"))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(rest, ":") {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}
