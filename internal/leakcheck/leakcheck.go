// Package leakcheck snapshots the resources a process holds — goroutines,
// open file descriptors, OS threads and, when asked, device memory and
// pinned host memory — and compares a later snapshot with a baseline,
// naming what leaked: the stacks of the extra goroutines and the targets
// of the extra descriptors.
//
// A leak test takes a baseline after a warm-up (lazily started runtime
// threads, caches), runs its workload many times, then calls Settle, which
// polls until every count is back within its tolerance or the settle time
// passes.
package leakcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Probe says how to read the resources that the operating system does not
// report to the process itself. A nil field is not measured.
type Probe struct {
	// DeviceMem returns the device memory in use (total − free, from
	// cuMemGetInfo). It is device-wide: other processes count too.
	DeviceMem func() (uint64, error)
	// Pinned returns the live page-locked host memory in bytes.
	Pinned func() uint64
}

// Snapshot is the resources of the process at one moment.
type Snapshot struct {
	Goroutines int
	// Stacks maps the stacks of the goroutines other than the caller's,
	// their ids and argument values removed, to how many goroutines have
	// each.
	Stacks map[string]int
	// FDs maps each open descriptor to its target (a path, socket:[inode],
	// pipe:[inode], anon_inode:...); nil where /proc/self/fd is missing.
	FDs map[int]string
	// Threads is the process's OS threads (/proc/self/status), -1 where
	// unknown.
	Threads int
	// DeviceMem and Pinned are in bytes; Has* says whether they were
	// measured.
	DeviceMem, Pinned       uint64
	HasDeviceMem, HasPinned bool
}

// Take snapshots the process now.
func Take(p Probe) (Snapshot, error) {
	s := Snapshot{Goroutines: runtime.NumGoroutine(), Stacks: stacks(), FDs: fds(), Threads: threads()}
	if p.DeviceMem != nil {
		m, err := p.DeviceMem()
		if err != nil {
			return s, fmt.Errorf("leakcheck: device memory: %w", err)
		}
		s.DeviceMem, s.HasDeviceMem = m, true
	}
	if p.Pinned != nil {
		s.Pinned, s.HasPinned = p.Pinned(), true
	}
	return s, nil
}

// stacks returns every other goroutine's stack, keyed without goroutine ids,
// argument values and program counters, so that equal code paths compare
// equal.
func stacks() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	// The first is the caller's own, which differs between the caller's
	// snapshots.
	gs := strings.Split(strings.TrimSpace(string(buf)), "\n\n")[1:]
	for _, g := range gs {
		var key []string
		for i, line := range strings.Split(g, "\n") {
			switch {
			case i == 0: // "goroutine 7 [chan receive, 2 minutes]:"
				if _, st, ok := strings.Cut(line, "["); ok {
					st, _, _ = strings.Cut(st, ",")
					st = strings.TrimSuffix(strings.TrimSuffix(st, "]:"), "]")
					key = append(key, "["+st+"]")
				}
			case strings.HasPrefix(line, "\t"): // file:line +0x..
				f, _, _ := strings.Cut(strings.TrimSpace(line), " ")
				key = append(key, "\t"+f)
			case strings.HasPrefix(line, "created by "):
				line, _, _ = strings.Cut(line, " in goroutine ")
				key = append(key, line)
			default: // function(args...)
				if j := strings.LastIndexByte(line, '('); j > 0 {
					line = line[:j]
				}
				key = append(key, line)
			}
		}
		out[strings.Join(key, "\n")]++
	}
	return out
}

// fds lists /proc/self/fd with the targets of the descriptors.
func fds() map[int]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	out := map[int]string{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// The directory's own descriptor is closed by now: its link is gone.
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		out[fd] = target
	}
	return out
}

// threads reads the Threads line of /proc/self/status.
func threads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// Tolerance is how far a snapshot may stay above its baseline.
type Tolerance struct {
	// Goroutines, FDs and Threads are extra counts allowed (0: back to the
	// baseline exactly). Threads usually needs a few: the Go runtime keeps
	// idle threads, and a busier moment than the warm-up starts more.
	Goroutines, FDs, Threads int
	// DeviceMem and Pinned are extra bytes allowed.
	DeviceMem, Pinned uint64
	// Settle is how long Settle waits for the counts to come back
	// (default 5 s).
	Settle time.Duration
}

// Leak is the error of a snapshot above its baseline; its message names
// every excess: the extra goroutines' stacks and the extra descriptors'
// targets.
type Leak struct {
	Base, Now Snapshot
	Problems  []string
}

func (l *Leak) Error() string {
	return "leakcheck: resources above the baseline:\n" + strings.Join(l.Problems, "\n")
}

// ErrLeak is matched by every *Leak.
var ErrLeak = errors.New("leakcheck: leak")

// Is makes errors.Is(err, ErrLeak) true for a *Leak.
func (l *Leak) Is(target error) bool { return target == ErrLeak }

// Compare returns nil if now is within tol of base, or a *Leak naming
// every excess.
func Compare(base, now Snapshot, tol Tolerance) error {
	var p []string
	if now.Goroutines > base.Goroutines+tol.Goroutines {
		p = append(p, fmt.Sprintf("goroutines: %d, baseline %d (tolerance %d); the extra stacks:\n%s",
			now.Goroutines, base.Goroutines, tol.Goroutines, extraStacks(base.Stacks, now.Stacks)))
	}
	if base.FDs != nil && now.FDs != nil && len(now.FDs) > len(base.FDs)+tol.FDs {
		p = append(p, fmt.Sprintf("file descriptors: %d, baseline %d (tolerance %d); not in the baseline:\n%s",
			len(now.FDs), len(base.FDs), tol.FDs, extraFDs(base.FDs, now.FDs)))
	}
	if base.Threads >= 0 && now.Threads > base.Threads+tol.Threads {
		p = append(p, fmt.Sprintf("OS threads: %d, baseline %d (tolerance %d)", now.Threads, base.Threads, tol.Threads))
	}
	if base.HasDeviceMem && now.HasDeviceMem && now.DeviceMem > base.DeviceMem+tol.DeviceMem {
		p = append(p, fmt.Sprintf("device memory in use: %d bytes, baseline %d (+%d, tolerance %d)",
			now.DeviceMem, base.DeviceMem, now.DeviceMem-base.DeviceMem, tol.DeviceMem))
	}
	if base.HasPinned && now.HasPinned && now.Pinned > base.Pinned+tol.Pinned {
		p = append(p, fmt.Sprintf("pinned host memory: %d bytes, baseline %d (+%d, tolerance %d)",
			now.Pinned, base.Pinned, now.Pinned-base.Pinned, tol.Pinned))
	}
	if p == nil {
		return nil
	}
	return &Leak{Base: base, Now: now, Problems: p}
}

func extraStacks(base, now map[string]int) string {
	var b strings.Builder
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if d := now[k] - base[k]; d > 0 {
			fmt.Fprintf(&b, "  %d× %s\n", d, strings.ReplaceAll(k, "\n", "\n     "))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func extraFDs(base, now map[int]string) string {
	// By target: a descriptor number reused for something else counts.
	count := map[string]int{}
	for _, t := range base {
		count[t]++
	}
	fds := make([]int, 0, len(now))
	for fd := range now {
		fds = append(fds, fd)
	}
	slices.Sort(fds)
	var b strings.Builder
	for _, fd := range fds {
		t := now[fd]
		if count[t] > 0 {
			count[t]--
			continue
		}
		fmt.Fprintf(&b, "  fd %d -> %s\n", fd, t)
	}
	return strings.TrimRight(b.String(), "\n")
}

// Settle takes snapshots until one is within tol of base, the settle time
// passes, or ctx ends, and returns the last one with Compare's verdict
// (or the context's error, joined to it).
func Settle(ctx context.Context, base Snapshot, p Probe, tol Tolerance) (Snapshot, error) {
	settle := tol.Settle
	if settle <= 0 {
		settle = 5 * time.Second
	}
	deadline := time.Now().Add(settle)
	wait := time.Millisecond
	for {
		now, err := Take(p)
		if err != nil {
			return now, err
		}
		err = Compare(base, now, tol)
		if err == nil || time.Now().After(deadline) {
			return now, err
		}
		select {
		case <-ctx.Done():
			return now, errors.Join(err, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Figures formats base and now on one line: "goroutines a→b fds a→b
// threads a→b gpuMem a→b pinned a→b" (the last two only where measured).
func Figures(base, now Snapshot) string {
	s := fmt.Sprintf("goroutines %d→%d fds %d→%d threads %d→%d",
		base.Goroutines, now.Goroutines, len(base.FDs), len(now.FDs), base.Threads, now.Threads)
	if base.HasDeviceMem && now.HasDeviceMem {
		s += fmt.Sprintf(" gpuMem %d→%d", base.DeviceMem, now.DeviceMem)
	}
	if base.HasPinned && now.HasPinned {
		s += fmt.Sprintf(" pinned %d→%d", base.Pinned, now.Pinned)
	}
	return s
}

// Baseline takes snapshots until the goroutine and descriptor counts have
// stayed the same for quiet (work of a warm-up still ending: a goroutine
// exiting, a socket closing), or for at most 5 s, and returns the last.
func Baseline(ctx context.Context, p Probe, quiet time.Duration) (Snapshot, error) {
	last, err := Take(p)
	if err != nil {
		return last, err
	}
	since, deadline := time.Now(), time.Now().Add(5*time.Second)
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return last, context.Cause(ctx)
		case <-time.After(quiet / 10):
		}
		now, err := Take(p)
		if err != nil {
			return now, err
		}
		if now.Goroutines != last.Goroutines || len(now.FDs) != len(last.FDs) {
			since = time.Now()
		}
		last = now
	}
	return last, nil
}
