// Package benchguard fails a test when a host-path benchmark regresses:
// slower than Factor times its committed baseline (baseline.txt, measured
// on the machine it names), or more allocations per call than the
// baseline. Machines differ and shared ones are noisy, so each benchmark
// runs Runs times, the fastest run counts, and the limit grows with a
// fixed calibration workload measured alongside (Calibrate): a machine
// twice as slow, or twice as busy, as the baseline's gets twice the time.
package benchguard

import (
	_ "embed"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Factor is how much slower than its baseline a benchmark may run.
const Factor = 2.0

// Runs is how many times a benchmark runs; the fastest counts.
const Runs = 3

// UpdateEnv names the environment variable that, set to 1, makes Check
// log each benchmark's line for baseline.txt instead of comparing.
const UpdateEnv = "NCCLGO_BENCHGUARD_UPDATE"

//go:embed baseline.txt
var baselineText string

// Baseline is one benchmark's committed figures: its time and
// allocations per call and the calibration's time measured with it.
type Baseline struct {
	NsPerOp     float64
	AllocsPerOp int64
	CalNsPerOp  float64
}

// Parse reads baseline lines, "name ns/op allocs/op calibration-ns/op";
// blank lines and lines starting with # are skipped.
func Parse(text string) (map[string]Baseline, error) {
	m := map[string]Baseline{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("benchguard: line %d %q: want \"name ns/op allocs/op calibration-ns/op\"", i+1, line)
		}
		ns, err := strconv.ParseFloat(f[1], 64)
		if err != nil || ns <= 0 {
			return nil, fmt.Errorf("benchguard: line %d: ns/op %q: want a number > 0", i+1, f[1])
		}
		allocs, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || allocs < 0 {
			return nil, fmt.Errorf("benchguard: line %d: allocs/op %q: want an integer >= 0", i+1, f[2])
		}
		cal, err := strconv.ParseFloat(f[3], 64)
		if err != nil || cal <= 0 {
			return nil, fmt.Errorf("benchguard: line %d: calibration ns/op %q: want a number > 0", i+1, f[3])
		}
		m[f[0]] = Baseline{NsPerOp: ns, AllocsPerOp: allocs, CalNsPerOp: cal}
	}
	return m, nil
}

// Result is the fastest of Runs runs of a benchmark, and of the
// calibration run after each.
type Result struct {
	NsPerOp     float64
	AllocsPerOp int64
	CalNsPerOp  float64
}

// Measure runs bench and Calibrate in turn Runs times (each as long as
// -test.benchtime, 1 s by default) and returns the fastest runs' ns/op and
// the fewest allocs/op.
func Measure(bench func(b *testing.B)) Result {
	var best Result
	for i := range Runs {
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			bench(b)
		})
		c := testing.Benchmark(Calibrate)
		ns, allocs, cal := perOp(r), r.AllocsPerOp(), perOp(c)
		if i == 0 || ns < best.NsPerOp {
			best.NsPerOp = ns
		}
		if i == 0 || allocs < best.AllocsPerOp {
			best.AllocsPerOp = allocs
		}
		if i == 0 || cal < best.CalNsPerOp {
			best.CalNsPerOp = cal
		}
	}
	return best
}

func perOp(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(max(r.N, 1))
}

// Calibrate is the reference workload: what a call's host path is made
// of (a lock, map lookups, arithmetic over a small struct array), a few
// hundred nanoseconds a call, fixed forever (changing it invalidates
// every baseline).
func Calibrate(b *testing.B) {
	var mu sync.Mutex
	m := map[uint64]uint64{}
	for i := range uint64(64) {
		m[i*0x9e3779b97f4a7c15] = i
	}
	var a [64]struct{ x, y uint64 }
	var k uint64
	for b.Loop() {
		mu.Lock()
		for i := range a {
			a[i].x += uint64(i) ^ a[(i+1)%len(a)].y
			a[i].y = a[i].x>>3 + k
		}
		for i := range uint64(8) {
			k += m[(i+k%64)*0x9e3779b97f4a7c15]
		}
		mu.Unlock()
	}
	runtime.KeepAlive(&a) // the work must not be optimized away
	runtime.KeepAlive(k)
}

// Check measures bench and fails t when it is slower than Factor times
// the baseline of name, or allocates more per call. Under the race
// detector, whose instrumentation changes every figure, it only runs the
// benchmark once to see that it works. A benchmark too slow at first is
// measured once more before it fails (a busy spell of a shared machine).
func Check(t *testing.T, name string, bench func(b *testing.B)) {
	t.Helper()
	base, err := Parse(baselineText)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := base[name]
	if !ok && os.Getenv(UpdateEnv) != "1" {
		t.Fatalf("benchguard: no baseline for %s in internal/benchguard/baseline.txt (run with %s=1 to print one)", name, UpdateEnv)
	}
	if RaceEnabled {
		testing.Benchmark(bench)
		t.Skip("the race detector is on: timings mean nothing")
	}
	got := Measure(bench)
	if os.Getenv(UpdateEnv) == "1" {
		t.Logf("baseline line: %s %.0f %d %.0f", name, got.NsPerOp, got.AllocsPerOp, got.CalNsPerOp)
		return
	}
	// The limit grows with the calibration: this machine, now, against
	// the baseline's, when slower (a faster one keeps the baseline's).
	scale := max(1, got.CalNsPerOp/want.CalNsPerOp)
	limit := Factor * want.NsPerOp * scale
	if got.NsPerOp > limit {
		// A busy spell can hit the benchmark's runs and not the
		// calibration's: a real regression is slow a second time too.
		again := Measure(bench)
		if again.NsPerOp/again.CalNsPerOp < got.NsPerOp/got.CalNsPerOp {
			got = again
			scale = max(1, got.CalNsPerOp/want.CalNsPerOp)
			limit = Factor * want.NsPerOp * scale
		}
	}
	t.Logf("%s: %.0f ns/op %d allocs/op, calibration %.0f ns/op (baseline %.0f ns/op %d allocs/op, calibration %.0f: limit %.0f ns/op)",
		name, got.NsPerOp, got.AllocsPerOp, got.CalNsPerOp, want.NsPerOp, want.AllocsPerOp, want.CalNsPerOp, limit)
	if got.AllocsPerOp > want.AllocsPerOp {
		t.Errorf("%s: %d allocs/op, baseline %d: the host path allocates more per call", name, got.AllocsPerOp, want.AllocsPerOp)
	}
	if got.NsPerOp > limit {
		t.Errorf("%s: %.0f ns/op (fastest of %d runs), more than %.1f × the baseline %.0f ns/op scaled by the calibration (%.0f ns/op now, %.0f then): the host path regressed",
			name, got.NsPerOp, Runs, Factor, want.NsPerOp, got.CalNsPerOp, want.CalNsPerOp)
	}
}
