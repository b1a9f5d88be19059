package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen/kspace"
	"github.com/ncclgo/ncclgo/internal/numfmt"
)

// errRecorder is a testing.TB that records Errorf calls instead of failing.
type errRecorder struct {
	testing.TB
	errs []string
}

func (e *errRecorder) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}
func (e *errRecorder) Helper() {}

// TestTileMatchesElementwise checks the suite's fast reference against the
// element-by-element definition, for every type and several phases.
func TestTileMatchesElementwise(t *testing.T) {
	tab := [period]float64{1, 2, 3, 1, 0, 2}
	for ty := kspace.I8; ty < kspace.NumTypes; ty++ {
		for _, phase := range []int{0, 1, 5} {
			for _, count := range []int{0, 1, 5, 6, 7, 1023} {
				vals := make([]float64, count)
				for i := range vals {
					vals[i] = tab[(phase+i)%period]
				}
				require.Equal(t, numfmt.Encode(ty, vals), tile(ty, tab, phase, count), "%s phase %d count %d", ty, phase, count)
			}
		}
	}
}

// TestCheckPeriodicFindsErrors makes sure the fast path cannot hide a wrong
// element, and that the tolerance still admits rounding differences.
func TestCheckPeriodicFindsErrors(t *testing.T) {
	tab := [period]float64{1, 2, 3, 1, 2, 3}
	exact := func(float64) float64 { return 0 }
	for ty := kspace.I8; ty < kspace.NumTypes; ty++ {
		got := tile(ty, tab, 2, 1000)
		rec := &errRecorder{TB: t}
		checkPeriodic(rec, "good", ty, got, tab, 2, exact)
		require.Empty(t, rec.errs, "%s: a correct buffer was rejected", ty)

		checkPeriodic(rec, "shifted", ty, got, tab, 0, exact)
		require.Len(t, rec.errs, 1, "%s: a buffer of the wrong phase was accepted", ty)

		bad := append([]byte(nil), got...)
		copy(bad[999*ty.Size():], numfmt.Encode(ty, []float64{0}))
		rec.errs = nil
		checkPeriodic(rec, "last element", ty, bad, tab, 2, exact)
		require.Len(t, rec.errs, 1, "%s: a wrong last element was accepted", ty)
		require.Contains(t, rec.errs[0], "1 of 1000 elements wrong")
	}
	// Floats within the tolerance pass the slow path.
	got := numfmt.Encode(kspace.F32, []float64{1 + 1e-7, 2, 3, 1, 2, 3})
	rec := &errRecorder{TB: t}
	checkPeriodic(rec, "rounding", kspace.F32, got, tab, 0, func(v float64) float64 { return 1e-6 * v })
	require.Empty(t, rec.errs)
}
