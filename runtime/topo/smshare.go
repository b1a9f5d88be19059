package topo

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ncclgo/ncclgo/runtime/residency"
)

// SMQuery is what SMShareOf asks the driver about one GPU (a
// *cuda.Context and its device in production, a fake in tests).
type SMQuery interface {
	// DeviceSMs is CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
	DeviceSMs() (int, error)
	// ContextSMs is the SM count of the context's execution affinity
	// (cuCtxGetExecAffinity); an error where the driver cannot say.
	ContextSMs() (int, error)
}

// SMShare is how many SMs of one GPU this process's kernels may use.
type SMShare struct {
	// SMs is the count the process sizes its channels from: the smaller
	// of the driver's two answers.
	SMs int
	// DeviceSMs and ContextSMs are the driver's answers (ContextSMs 0
	// when it gave none).
	DeviceSMs, ContextSMs int
	// Percent is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when MPS serves the
	// process, else 0.
	Percent float64
	// MPS reports whether an MPS daemon serves the process.
	MPS bool
}

// Own reports whether the share is the process's alone: MPS confines it
// to Percent of the SMs. Processes whose percentages add up to at most 100
// never compete for SMs.
func (s SMShare) Own() bool { return s.MPS && s.Percent > 0 }

func (s SMShare) String() string {
	b := fmt.Sprintf("%d SMs (device attribute %d", s.SMs, s.DeviceSMs)
	if s.ContextSMs > 0 {
		b += fmt.Sprintf(", execution affinity %d", s.ContextSMs)
	}
	b += ")"
	switch {
	case s.Own():
		b += fmt.Sprintf(", MPS share %s=%g", residency.EnvMPSPercent, s.Percent)
	case s.MPS:
		b += ", MPS without " + residency.EnvMPSPercent
	}
	return b
}

// SMShareOf finds the SMs this process may use on q's GPU. mps tells
// whether MPS serves the process (MPSActive); getenv is os.Getenv
// normally.
//
// Under MPS with an active thread percentage the driver itself reports the
// client's share: the device attribute counts the SMs the client may use
// (a 10 % client of a 40-SM T4 reads 4), and so does the context's
// execution affinity. SMShareOf takes the driver's word and does not scale
// by the percentage again, which would count the share twice (a 50 %
// client of an H200 sized its channels for 33 SMs instead of 66). The
// percentage only decides whether the share is the process's own (Own).
// A malformed percentage is an error naming the variable.
func SMShareOf(q SMQuery, mps bool, getenv func(string) string) (SMShare, error) {
	s := SMShare{MPS: mps}
	var err error
	if s.DeviceSMs, err = q.DeviceSMs(); err != nil {
		return SMShare{}, fmt.Errorf("topo: SM count: %w", err)
	}
	if s.DeviceSMs < 1 {
		return SMShare{}, fmt.Errorf("topo: the device reports %d SMs", s.DeviceSMs)
	}
	s.SMs = s.DeviceSMs
	if n, err := q.ContextSMs(); err == nil && n > 0 {
		s.ContextSMs = n
		s.SMs = min(s.SMs, n)
	}
	if v := strings.TrimSpace(getenv(residency.EnvMPSPercent)); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p > 0 && p <= 100) || math.IsNaN(p) {
			return SMShare{}, fmt.Errorf("topo: %s=%q: want a percentage in (0, 100]", residency.EnvMPSPercent, v)
		}
		if mps {
			s.Percent = p
		}
	}
	return s, nil
}
