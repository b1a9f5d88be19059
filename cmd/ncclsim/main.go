// Command ncclsim proves the bootstrap's scale by simulation, on CPU: it
// runs N ranks as goroutines over loopback TCP, on fake hosts of -per-host
// ranks each (each host its own address 127.1.x.y), and reports time, CPU
// time and memory per phase:
//
//   - init: the roots (-roots, by default one per 1024 ranks, so that a
//     root's slice of check-ins fits the listen backlog, 4096 by default
//     on Linux, with room to spare) and every rank's
//     bootstrap.JoinScalable;
//   - barrier: one Barrier;
//   - allgather: one AllGather of 64-byte blocks;
//   - topo: the topology exchange of init (an AllGather of each rank's
//     host, device and bus id, as JSON);
//   - graph: the rings and double binary trees of -channels channels,
//     checked for validity (every rank once per ring, trees spanning, each
//     tree's depth ⌈log2 n⌉ as designed);
//   - tune: the tuner's plan for AllReduce, AllGather and Broadcast at
//     a few sizes.
//
// The graph and the tuner's plan are pure functions of the exchanged
// topology, identical on every rank, so ncclsim computes them once.
//
// Usage:
//
//	ncclsim [-ranks 64,256,1024,4096,16384] [-roots 0] [-per-host 8] [-channels 2] [-timeout 120s]
//
// The soft limit of open files is raised to the hard one (and the hard
// one, when the process may, to what the kernel allows): every rank holds
// a listener and its connections, two descriptors each in one process.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ncclsim:", err)
		os.Exit(1)
	}
}

type flags struct {
	procs    int
	child    bool
	n, lo    int
	hi       int
	ids      string
	ranks    []int
	roots    int
	perHost  int
	channels int
	timeout  time.Duration
	cpuprof  string
	// gatherMax: sizes above it skip the AllGather phases.
	gatherMax int
}

func parse(args []string) (flags, error) {
	fs := flag.NewFlagSet("ncclsim", flag.ContinueOnError)
	ranks := fs.String("ranks", "64,256,1024,4096,16384", "comma-separated rank counts to simulate")
	f := flags{}
	fs.IntVar(&f.roots, "roots", 0, "bootstrap roots (0: one per 1024 ranks)")
	fs.IntVar(&f.perHost, "per-host", 8, "ranks per fake host")
	fs.IntVar(&f.channels, "channels", 2, "channels of rings and trees to build and check")
	fs.DurationVar(&f.timeout, "timeout", 120*time.Second, "bootstrap timeout")
	fs.StringVar(&f.cpuprof, "cpuprofile", "", "write a CPU profile of the ranks to this file (with several processes, one file per process: FILE.LO, LO its first rank)")
	fs.IntVar(&f.gatherMax, "gather-max", 4096, "largest rank count that runs the AllGather phases (their results are n² blocks)")
	fs.IntVar(&f.procs, "procs", 0, "processes to run the ranks in (0: enough to stay below 15000 descriptors each)")
	fs.BoolVar(&f.child, "child", false, "internal: run ranks -lo..-hi of -n, roots -ids")
	fs.IntVar(&f.n, "n", 0, "internal (-child)")
	fs.IntVar(&f.lo, "lo", 0, "internal (-child)")
	fs.IntVar(&f.hi, "hi", 0, "internal (-child)")
	fs.StringVar(&f.ids, "ids", "", "internal (-child)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	for _, s := range strings.Split(*ranks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > bootstrap.MaxRanks {
			return f, fmt.Errorf("-ranks: %q is not a rank count in 1..%d", s, bootstrap.MaxRanks)
		}
		f.ranks = append(f.ranks, n)
	}
	switch {
	case f.roots < 0 || f.roots > bootstrap.MaxRoots:
		return f, fmt.Errorf("-roots=%d: want 0..%d", f.roots, bootstrap.MaxRoots)
	case f.perHost < 1:
		return f, fmt.Errorf("-per-host=%d: want at least 1", f.perHost)
	case f.procs < 0:
		return f, fmt.Errorf("-procs=%d: want 0 or more", f.procs)
	case f.channels < 1:
		return f, fmt.Errorf("-channels=%d: want at least 1", f.channels)
	}
	return f, nil
}

func run(args []string, w io.Writer) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if f.child {
		return childMain(f)
	}
	limit, err := raiseFileLimit()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# ncclsim: %d CPUs, GOMAXPROCS %d, open-file limit %d, loopback TCP, %d ranks per fake host\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), limit, f.perHost)
	fmt.Fprintf(w, "%-7s %-5s %-5s %-10s %10s %10s %12s %10s %10s %s\n", "ranks", "roots", "procs", "phase", "time", "cpu", "heap/rank", "fds/rank", "gor/rank", "note")
	for _, n := range f.ranks {
		if err := simulate(w, f, n); err != nil {
			return fmt.Errorf("%d ranks: %w", n, err)
		}
	}
	return nil
}

// raiseFileLimit raises the soft limit of open files to the hard one,
// after trying to raise the hard one to the kernel's nr_open.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if max, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && max > lim.Max {
			want := syscall.Rlimit{Cur: max, Max: max}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
				return max, nil
			}
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, nil
}

// probe is the process's state at a point in time.
type probe struct {
	heap uint64        // HeapInuse + StackInuse
	cpu  time.Duration // user + system time of the process so far
	fds  int
	gor  int
}

func measure(gc bool) probe {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return probe{heap: ms.HeapInuse + ms.StackInuse, cpu: cpu, fds: fds, gor: runtime.NumGoroutine()}
}

// peerInfo is what each rank tells the others in the topology exchange,
// as the root package's setup does.
type peerInfo struct {
	Host   string
	Device int
	BusID  string
}

// record is one phase as one process saw it: when its last rank finished
// it (End, Unix nanoseconds) and the process's state then beyond its
// baseline. Dur, when set, is the phase's own duration (phases computed
// once, by the process holding rank 0).
type record struct {
	Phase string
	End   int64
	Dur   time.Duration
	Heap  int64
	CPU   time.Duration // the process's CPU time since the baseline
	FDs   int
	Gor   int
	Note  string
}

// runRanks runs ranks [lo, hi) of n through every phase, calling emit
// after each. start is closed when the ranks may begin.
func runRanks(f flags, ids []bootstrap.UniqueID, n, lo, hi int, base probe, start <-chan struct{}, emit func(record)) error {
	ctx := context.Background()
	opts := bootstrap.Options{Timeout: f.timeout, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	nets := make([]*bootstrap.Conn, hi-lo)
	defer func() {
		for _, c := range nets {
			if c != nil {
				c.Close()
			}
		}
	}()
	phase := func(name, note string) {
		now := measure(false)
		emit(record{Phase: name, End: time.Now().UnixNano(), Heap: int64(now.heap) - int64(base.heap), CPU: now.cpu - base.cpu, FDs: now.fds - base.fds, Gor: now.gor - base.gor, Note: note})
	}
	each := func(fn func(r int, c *bootstrap.Conn) error) error {
		return onAll(hi-lo, func(i int) error { return fn(lo+i, nets[i]) })
	}
	<-start
	if err := each(func(r int, _ *bootstrap.Conn) error {
		o := opts
		o.LocalIP = hostIP(r / f.perHost)
		c, err := bootstrap.JoinScalable(ctx, ids, r, n, o)
		nets[r-lo] = c
		return err
	}); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	phase("init", fmt.Sprintf("%d roots", len(ids)))
	if err := each(func(_ int, c *bootstrap.Conn) error { return c.Barrier(ctx) }); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	phase("barrier", fmt.Sprintf("2×%d tree steps, opens the connections", bits.Len(uint(n-1))))
	if err := each(func(_ int, c *bootstrap.Conn) error { return c.Barrier(ctx) }); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	phase("barrier2", "connections open")
	var devs []int
	hosts := 0
	if n > f.gatherMax {
		// An AllGather leaves n blocks on each of n ranks (n² in all:
		// 17 GB of 64-byte blocks at 16,384 ranks), more than this
		// machine holds: the graph uses the fake layout directly.
		devs = make([]int, n)
		for p := range devs {
			devs[p] = p
		}
		hosts = (n + f.perHost - 1) / f.perHost
	} else if err := gatherPhases(f, n, each, phase, &devs, &hosts); err != nil {
		return err
	}

	if lo == 0 {
		t0 := time.Now()
		layout := topo.NewLayout(devs)
		rings := graph.Rings(layout, f.channels)
		trees := graph.Trees(n, f.channels)
		if err := checkGraphs(rings, trees, n, f.perHost); err != nil {
			return err
		}
		emit(record{Phase: "graph", Dur: time.Since(t0), Note: fmt.Sprintf("%d fake hosts; %d rings, %d trees valid, depth %d", hosts, len(rings), len(trees), trees[0].Depth)})
		t0 = time.Now()
		tp := tune.Topology{NRanks: n, NNodes: hosts, NGPUs: layout.NGPUs, RanksPerGPU: 1, SMCount: 132, BlocksPerSM: 1,
			IntraBW: 20, InterBW: 12, NChannels: f.channels}
		tn, err := tune.New(tp, config.Default(), nil)
		if err != nil {
			return err
		}
		var plan []string
		for _, c := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.Broadcast} {
			for _, size := range []int64{64, 1 << 20, 1 << 30} {
				ch, err := tn.Choose(c, kspace.Sum, kspace.F32, size)
				if err != nil && !errors.Is(err, tune.ErrNoChoice) {
					return fmt.Errorf("tuner: %s of %d bytes: %w", c, size, err)
				}
				if size == 1<<20 {
					plan = append(plan, fmt.Sprintf("%s 1MiB: %s/%s", c, algo(ch), ch.Proto))
				}
			}
		}
		emit(record{Phase: "tune", Dur: time.Since(t0), Note: strings.Join(plan, "; ")})
	}
	// Everybody is done before anybody closes.
	if err := each(func(_ int, c *bootstrap.Conn) error { return c.Barrier(ctx) }); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	for i, c := range nets {
		c.Close()
		nets[i] = nil
	}
	phase("close", "")
	return nil
}

// simulate runs one size: the roots here, the ranks in procs processes
// (this one when procs is 1), and prints the table's rows.
func simulate(w io.Writer, f flags, n int) error {
	roots := f.roots
	if roots == 0 {
		roots = (n + ranksPerRoot - 1) / ranksPerRoot
	}
	roots = min(roots, n)
	procs := f.procs
	if procs == 0 {
		// Stay well below a process's descriptor limit: a rank holds a
		// listener and about 2·log2 n connection ends.
		procs = (n*(1+2*bits.Len(uint(n-1))) + perProcFDs - 1) / perProcFDs
	}
	procs = min(procs, n)
	debug.FreeOSMemory()
	ctx := context.Background()
	opts := bootstrap.Options{Timeout: f.timeout, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ids := make([]bootstrap.UniqueID, roots)
	rs := make([]*bootstrap.Root, roots)
	for i := range ids {
		r, id, err := bootstrap.NewRoot(ctx, opts)
		if err != nil {
			return err
		}
		defer r.Close()
		rs[i], ids[i] = r, id
	}
	var mu sync.Mutex
	var recs []record
	emit := func(r record) {
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}
	var t0 time.Time
	if procs == 1 {
		if f.cpuprof != "" {
			stop, err := startProfile(f.cpuprof)
			if err != nil {
				return err
			}
			defer stop()
		}
		base := measure(true)
		start := make(chan struct{})
		t0 = time.Now()
		close(start)
		if err := runRanks(f, ids, n, 0, n, base, start, emit); err != nil {
			return err
		}
	} else {
		var err error
		if t0, err = runChildren(f, ids, n, procs, emit); err != nil {
			return err
		}
	}
	for i, r := range rs {
		if err := r.Wait(ctx); err != nil {
			return fmt.Errorf("root %d: %w", i, err)
		}
	}
	// One row per phase: the time from the previous phase's last rank to
	// this one's, the CPU time the ranks' processes spent on it (the
	// roots' excluded when the ranks run in child processes), the state
	// summed over the processes.
	prev := t0.UnixNano()
	var prevCPU time.Duration
	for _, ph := range []string{"init", "barrier", "barrier2", "allgather", "topo", "graph", "tune", "close"} {
		var end int64
		var dur time.Duration
		var heap int64
		var cpu time.Duration
		fds, gor, seen := 0, 0, 0
		note := ""
		for _, r := range recs {
			if r.Phase != ph {
				continue
			}
			seen++
			end, dur = max(end, r.End), max(dur, r.Dur)
			heap += r.Heap
			cpu += r.CPU
			fds += r.FDs
			gor += r.Gor
			if r.Note != "" {
				note = r.Note
			}
		}
		if seen == 0 {
			continue
		}
		if end != 0 {
			dur = time.Duration(end - prev)
			prev = end
		}
		row := fmt.Sprintf("%-7d %-5d %-5d %-10s %10s", n, roots, procs, ph, dur.Round(time.Millisecond))
		if ph == "graph" || ph == "tune" {
			fmt.Fprintf(w, "%s %10s %12s %10s %10s %s\n", row, "", "", "", "", note)
			continue
		}
		row += fmt.Sprintf(" %10s", (cpu - prevCPU).Round(time.Millisecond))
		prevCPU = cpu
		fmt.Fprintf(w, "%s %10.1fKB %10.2f %10.2f %s\n", row, float64(heap)/1024/float64(n), float64(fds)/float64(n), float64(gor)/float64(n), note)
	}
	return nil
}

// ranksPerRoot is how many ranks' check-ins one root serves by default.
const ranksPerRoot = 1024

// perProcFDs is how many descriptors ncclsim lets one process's ranks use.
const perProcFDs = 15000

// runChildren runs ranks [0, n) in procs child processes of this program
// and returns when they started together.
func runChildren(f flags, ids []bootstrap.UniqueID, n, procs int, emit func(record)) (time.Time, error) {
	exe, err := os.Executable()
	if err != nil {
		return time.Time{}, err
	}
	hex := make([]string, len(ids))
	for i, id := range ids {
		hex[i] = id.String()
	}
	type child struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		out   *bufio.Scanner
		lo    int
		ready chan error
		done  chan error
	}
	kids := make([]*child, procs)
	for p := range kids {
		lo, hi := p*n/procs, (p+1)*n/procs
		cmd := exec.Command(exe, "-child", "-n", strconv.Itoa(n), "-lo", strconv.Itoa(lo), "-hi", strconv.Itoa(hi),
			"-ids", strings.Join(hex, ","), "-per-host", strconv.Itoa(f.perHost), "-channels", strconv.Itoa(f.channels),
			"-timeout", f.timeout.String(), "-cpuprofile", f.cpuprof, "-gather-max", strconv.Itoa(f.gatherMax))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return time.Time{}, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return time.Time{}, err
		}
		if err := cmd.Start(); err != nil {
			return time.Time{}, err
		}
		kids[p] = &child{cmd: cmd, in: in, out: bufio.NewScanner(out), lo: lo, ready: make(chan error, 1), done: make(chan error, 1)}
		defer cmd.Process.Kill()
	}
	for _, k := range kids {
		go func() {
			if !k.out.Scan() || k.out.Text() != "ready" {
				k.ready <- fmt.Errorf("child for ranks from %d did not start: %v", k.lo, k.out.Err())
				k.done <- k.cmd.Wait()
				return
			}
			k.ready <- nil
			for k.out.Scan() {
				var r record
				if err := json.Unmarshal(k.out.Bytes(), &r); err != nil {
					k.done <- fmt.Errorf("child for ranks from %d: %q: %w", k.lo, k.out.Text(), err)
					return
				}
				emit(r)
			}
			if err := k.cmd.Wait(); err != nil {
				k.done <- fmt.Errorf("child for ranks from %d: %w", k.lo, err)
				return
			}
			k.done <- nil
		}()
	}
	for _, k := range kids {
		if err := <-k.ready; err != nil {
			return time.Time{}, err
		}
	}
	t0 := time.Now()
	for _, k := range kids {
		fmt.Fprintln(k.in, "go")
		k.in.Close()
	}
	for _, k := range kids {
		if err := <-k.done; err != nil {
			return time.Time{}, err
		}
	}
	return t0, nil
}

// childMain runs as one child process of runChildren.
func childMain(f flags) error {
	if _, err := raiseFileLimit(); err != nil {
		return err
	}
	var ids []bootstrap.UniqueID
	for _, s := range strings.Split(f.ids, ",") {
		id, err := bootstrap.ParseUniqueID(s)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	base := measure(true)
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(r record) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(r)
	}
	if f.cpuprof != "" {
		stop, err := startProfile(fmt.Sprintf("%s.%d", f.cpuprof, f.lo))
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Println("ready")
	start := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(start)
	}()
	return runRanks(f, ids, f.n, f.lo, f.hi, base, start, emit)
}

// gatherPhases runs the AllGather phases: one of 64-byte blocks, checked,
// and the topology exchange, which sets devs and hosts.
func gatherPhases(f flags, n int, each func(func(r int, c *bootstrap.Conn) error) error, phase func(name, note string), devs *[]int, hosts *int) error {
	ctx := context.Background()
	if err := each(func(r int, c *bootstrap.Conn) error {
		b := make([]byte, 64)
		b[0], b[1] = byte(r), byte(r>>8)
		all, err := c.AllGather(ctx, b)
		if err != nil {
			return err
		}
		for p, blk := range all {
			if len(blk) != 64 || blk[0] != byte(p) || blk[1] != byte(p>>8) {
				return fmt.Errorf("rank %d: block of rank %d is wrong", r, p)
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("allgather: %w", err)
	}
	phase("allgather", "64 B blocks, checked")

	if err := each(func(r int, c *bootstrap.Conn) error {
		me := peerInfo{Host: fmt.Sprintf("host-%d", r/f.perHost), Device: r % f.perHost, BusID: fmt.Sprintf("0000:%02x:00.0", r%f.perHost)}
		b, _ := json.Marshal(me)
		all, err := c.AllGather(ctx, b)
		if err != nil || r != 0 {
			return err
		}
		// Rank 0 stands for all: each rank would decode the same.
		hostOf := map[string]int{}
		*devs = make([]int, n)
		for p, raw := range all {
			var pi peerInfo
			if err := json.Unmarshal(raw, &pi); err != nil {
				return fmt.Errorf("rank %d's description: %w", p, err)
			}
			h, ok := hostOf[pi.Host]
			if !ok {
				h = len(hostOf)
				hostOf[pi.Host] = h
			}
			(*devs)[p] = h*f.perHost + pi.Device // a global GPU number
		}
		*hosts = len(hostOf)
		return nil
	}); err != nil {
		return fmt.Errorf("topology exchange: %w", err)
	}
	phase("topo", "AllGather of JSON rank descriptions")
	return nil
}

// hostIP is fake host h's own loopback address, 127.1.0.0 + h: each host
// has its own ports, as real hosts do (one address's ephemeral range,
// about 28,000 ports, cannot hold 16,384 listeners and their check-in
// connections).
func hostIP(h int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(1 + h>>16), byte(h >> 8), byte(h)})
}

// startProfile starts a CPU profile written to path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	fp, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(fp); err != nil {
		fp.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); fp.Close() }, nil
}

func algo(c tune.Choice) string {
	if c.Algo == kspace.Unset {
		return "-"
	}
	return c.Algo.String()
}

// checkGraphs checks every ring is a permutation that visits each fake
// host's ranks together, and every tree spans the ranks with the designed
// depth, ⌈log2 n⌉.
func checkGraphs(rings [][]int, trees []graph.Tree, n, perHost int) error {
	for c, ring := range rings {
		if err := graph.CheckRing(ring, n); err != nil {
			return fmt.Errorf("channel %d: %w", c, err)
		}
		crossings := 0
		for i, r := range ring {
			if r/perHost != ring[(i+1)%n]/perHost {
				crossings++
			}
		}
		if hosts := (n + perHost - 1) / perHost; hosts > 1 && crossings != hosts {
			return fmt.Errorf("channel %d: ring crosses between hosts %d times, want %d (once per host)", c, crossings, hosts)
		}
	}
	for c, t := range trees {
		if err := graph.CheckTree(t, n); err != nil {
			return fmt.Errorf("channel %d: %w", c, err)
		}
		if want := bits.Len(uint(n - 1)); t.Depth != want {
			return fmt.Errorf("channel %d: tree depth %d, want ⌈log2 %d⌉ = %d", c, t.Depth, n, want)
		}
	}
	return nil
}

// onAll runs fn for ranks 0..n-1 concurrently and returns the first
// error, naming its rank.
func onAll(n int, fn func(r int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}
