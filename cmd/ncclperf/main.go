// Command ncclperf measures ncclgo's collectives with nccl-tests' flags and
// columns, and can run the same sweep through a real NCCL library in the same
// run (-compare) to print the ratio.
//
//	ncclperf -coll allreduce -b 8 -e 512M -f 2 -g 2 [-compare libnccl.so.2]
//	ncclperf --op all --datatype all --minbytes 8 --maxbytes 1M --ngpus 2
//
// nccl-tests' options are accepted with their short and long names (-b,
// --minbytes, ...; -d all and -o all sweep every type and op), and the
// timing is nccl-tests' own, for both libraries: all sizes warmed up first,
// then per size one untimed iteration and a host clock around -n
// iterations issued back to back, buffers shifted per iteration, streams
// drained by polling (sched_yield between passes, never parking the
// thread), out-of-place then in-place at every size for both libraries.
// Every call comes from one OS thread, every rank's call in one group per
// iteration when there are several (nccl-tests' -t 1 -g N); -N repeats the
// timed sweep after the one warm-up, as nccl-tests' -N does. The NCCL
// library's timed iterations are issued from C (-ref-loop=c), each making
// the calls nccl-tests makes (ncclCommUserRank before a Broadcast, for
// one), so that Go's cost per cgo call is not counted as NCCL's.
//
// Sizes, counts and pointers are nccl-tests' too: the size column of
// AllGather, ReduceScatter and AllToAll is the whole buffer (nRanks chunks),
// each chunk rounded down to 16 bytes, and a size whose chunk rounds to
// nothing (8 or 16 B of floats on 2 ranks) is left out, where nccl-tests
// prints a 0-byte row of no-ops.
//
// Ranks are placed round-robin over the visible GPUs unless -devices lists
// them, so -g 4 on a one-GPU machine puts four ranks on that GPU and -g 8
// on an eight-GPU machine one rank on each. -coll all sweeps AllReduce,
// AllGather, ReduceScatter and Broadcast in turn, one table each, with one
// initialisation of each library.
//
// With -compare, ncclgo's sweep runs first and its communicators are
// destroyed; then the NCCL library's sweep runs, alone in the process,
// with buffers from ncclMemAlloc as nccl-tests allocates them. The last
// columns are its out-of-place time and busbw and the ratio, > 1 when
// ncclgo is better: below ratioSplit (64 KiB, the size column) it is
// NCCL's time over ncclgo's (latency), from there ncclgo's busbw over
// NCCL's (both out-of-place); the "by" column says which. -ncclgo=false
// times only the library, in nccl-tests' columns (in-place too): the
// calibration against nccl-tests itself.
//
// Ranks as processes: -np N spawns ncclperf N times, one rank per process
// (rank r on GPU r modulo the visible GPUs, or -devices' r-th entry), and
// under mpirun, torchrun or srun (their rank variables set) ncclperf runs
// as one rank of their job. Each process runs the same sweep on its rank
// (InitRank; with -compare, ncclCommInitRank after ncclgo's communicator
// is destroyed), the ranks combine each size's times as nccl-tests with
// MPI does (-a: the mean by default, or rank 0's, the minimum, the
// maximum) and sum the wrong counts, and rank 0 prints the table. A rank
// that fails or dies makes the others exit with an error naming it (see
// mproc.go).
//
// -hosts H with -np N simulates H hosts on one machine: the ranks are
// split into H blocks of consecutive ranks (sizes differing by at most
// one), and the processes of block k get NCCL_HOSTID=<prefix>-host<k>, so
// that ranks of one fake host connect through P2P or SHM and ranks of
// different ones through NET. The prefix is the launcher's NCCL_HOSTID
// when set, else ncclperf and the launcher's pid (two jobs never share a
// fake host). Device choice is unchanged (rank r on GPU r modulo the
// visible GPUs). Under mpirun or torchrun, set NCCL_HOSTID per process
// instead.
//
//	ncclperf -np 2 -coll allreduce -b 8 -e 128M -f 4 -c 1 [-compare libnccl.so.2]
//	ncclperf -np 4 -hosts 2 -coll allreduce -b 8 -e 128M -f 4
//	mpirun -np 2 ncclperf -coll allreduce -b 8 -e 128M -f 4
//
// Checking (-c 1) stays cheap at any size: inputs are periodic, so each
// rank uploads at most fillChunk elements and the device replicates them;
// outputs up to -check-max bytes per rank are checked whole, larger ones on
// sampled windows (evenly spread, plus the rank-chunk boundaries of
// AllGather). Checks run on the untimed iteration before each timed loop;
// after a check the job's processes meet and run a second untimed
// iteration, so that one process's longer check is not timed as another's
// (bench.go says how this departs from nccl-tests).
// The data derive from one seed per job, rank 0's when the ranks are
// processes: NCCLGO_TEST_SEED, else drawn from the clock; the table's
// header prints it.
package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/internal/cli"
	"github.com/ncclgo/ncclgo/internal/launch"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// coll is a collective ncclperf can sweep.
type coll int

const (
	collAllReduce coll = iota
	collAllGather
	collReduceScatter
	collBroadcast
	collReduce
	collSendRecv // each rank sends to the next and receives from the previous (nccl-tests' sendrecv)
	collAllToAll // count elements to and from every rank (nccl-tests' alltoall)
)

var collNames = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv", "alltoall"}

// p2p reports whether c is made of sends and receives, which have no
// in-place form.
func (c coll) p2p() bool { return c == collSendRecv || c == collAllToAll }

// allColls is what -coll all sweeps.
var allColls = []coll{collAllReduce, collAllGather, collReduceScatter, collBroadcast}

// ratioSplit is the size from which the ratio compares busbw rather than
// time.
const ratioSplit = 64 << 10

func (c coll) String() string { return collNames[c] }

func parseColl(s string) (coll, error) {
	norm := strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	for i, n := range collNames {
		if n == norm {
			return coll(i), nil
		}
	}
	return 0, fmt.Errorf("-coll %q: unknown collective; valid are %s", s, strings.Join(collNames, ", "))
}

// collModel is the device collective of each collective but alltoall,
// which is none (SendRecv with every peer): kspace describes them.
var collModel = [...]kspace.Coll{
	collAllReduce:     kspace.AllReduce,
	collAllGather:     kspace.AllGather,
	collReduceScatter: kspace.ReduceScatter,
	collBroadcast:     kspace.Broadcast,
	collReduce:        kspace.Reduce,
	collSendRecv:      kspace.SendRecv,
}

// busFactor converts algorithm bandwidth to bus bandwidth, as nccl-tests does.
func (c coll) busFactor(n int) float64 {
	if c == collAllToAll {
		return kspace.AllToAllBus.Factor(n)
	}
	return collModel[c].BusFactor(n)
}

// blocks is how many blocks of the count argument one rank's send and
// receive buffers hold on n ranks (kspace.Coll.Blocks); alltoall sends a
// block to and receives one from every rank.
func (c coll) blocks(n int) (send, recv int64) {
	if c == collAllToAll {
		return int64(n), int64(n)
	}
	s, r := collModel[c].Blocks(n)
	return int64(s), int64(r)
}

// backend runs one collective on every rank, as one group, on streams[r].
// All its methods are called from one OS thread (run locks it). A backend
// that can report a communicator's asynchronous error implements
// asyncErrer, which drain polls.
type backend interface {
	Name() string
	// Begin makes the calling thread ready to issue Run: for NCCL, the
	// first rank's device current, as nccl-tests' cudaSetDevice(gpus[0]).
	// It is called before each warm-up and timed loop, since the checks
	// and synchronizations between them change the current context.
	Begin() error
	Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error
	// Alloc and Free manage rank r's device buffers the way the library's
	// own benchmark does (nccl-tests allocates with ncclMemAlloc).
	Alloc(r int, ctx *cuda.Context, n uint64) (cuda.DevicePtr, error)
	Free(r int, ctx *cuda.Context, p cuda.DevicePtr) error
	Close() error
}

type config struct {
	register        int // -R: 2 registers the buffers as windows (ncclgo backend)
	coll            coll
	colls           []coll // the sweeps to run (-coll all: allColls)
	checkMax        int64  // bytes of one rank's output checked whole
	minBytes        int64
	maxBytes        int64
	factor          int64
	step            int64
	nRanks          int
	devices         []int
	iters, warmup   int
	cycles          int           // -N: sweeps after the warm-up
	graphLaunches   int           // -G: CUDA graph mode (graph.go)
	graphOne        bool          // -graph-one: -G captures every rank into one graph (graph.go)
	timeout         time.Duration // -T: how long drain waits for busy streams (0: for ever)
	check           bool
	op              redOp
	ops             []redOp // -o all: every op
	dt              dataType
	types           []dataType // -d all: every type
	root            int
	ncclgo          bool   // run the sweep through ncclgo (-ncclgo=false: only -compare's library)
	hostTime        bool   // -hosttime: report the enqueue loop's own time
	refLoop         string // -ref-loop: go or c, where the reference's timed loop runs
	cpuProfile      string // -cpuprofile: write a Go CPU profile here
	trace           string // -trace: write a Go execution trace here
	compare, fatbin string
	p2pPerPeer      int           // Options.P2PChannelsPerPeer (-p2p-channels; 0: ncclgo's default)
	np              int           // -np: processes to spawn, one rank each
	hosts           int           // -hosts: fake hosts the -np ranks are split over (0, 1: one)
	average         int           // -a: how per-rank times combine (avgRank0..avgMax)
	place           *launch.Place // this process's place in a launched job, else nil
	mp              *mpRank       // the job's control channel, with ranks in several processes
	rank0           int           // the communicator rank of this process's first rank
	seed            dataSeed      // the check's data seed, the job's (run sets it)
}

// job is one table: a collective, a type and an op.
type job struct {
	coll coll
	dt   dataType
	op   redOp
}

// jobs lists the tables to measure, in nccl-tests' order: for each
// collective, each type, each op (ops only for reducing collectives).
func (c *config) jobs() []job {
	var js []job
	for _, k := range c.colls {
		for _, t := range c.types {
			ops := c.ops
			if !k.reduces() {
				ops = ops[:1]
			}
			for _, o := range ops {
				js = append(js, job{k, t, o})
			}
		}
	}
	return js
}

// forJob returns a copy of c that measures j.
func (c *config) forJob(j job) *config {
	cc := *c
	cc.coll, cc.dt, cc.op = j.coll, j.dt, j.op
	return &cc
}

// noDriverHint says what to do when the CUDA driver cannot be loaded.
const noDriverHint = "it needs an NVIDIA GPU and its driver (libcuda.so.1): install the NVIDIA driver, " +
	"or run the binary that `make bundle` builds (bundle/bin/ncclperf) on a GPU machine, " +
	"with NCCLGO_FATBIN (or -fatbin) naming a kernel image built there by `ncclgen build`"

func main() {
	place, err := launch.FromEnv(os.Getenv)
	var at *launch.Place
	switch {
	case err == nil:
		at = &place
	case !errors.Is(err, launch.ErrNotLaunched):
		exit(cli.Usage(err)) // the launcher's variables are the job's command line
	}
	c, err := parseArgs(os.Args[1:], os.Stdout, at)
	if err != nil {
		exit(err)
	}
	if c.np > 0 && c.place == nil {
		exit(spawn(c, os.Args[1:], os.Stdout, os.Stderr))
	}
	// -cpuprofile and -trace: one file per rank under a launcher.
	for _, p := range []struct {
		flag, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"-cpuprofile", c.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"-trace", c.trace, trace.Start, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := createProfile(p.path, c.place, p.start)
		if err != nil {
			exit(fmt.Errorf("%s: %w", p.flag, err))
		}
		defer f.Close()
		defer p.stop()
	}
	if err := run(c, os.Stdout); err != nil {
		trace.Stop()
		pprof.StopCPUProfile()
		exit(err)
	}
}

// exit ends ncclperf after err as internal/cli's convention says: a
// usage error exits 2, another failure 1, nil (or -h) 0.
func exit(err error) {
	if err != nil && !errors.Is(err, cli.ErrHelp) {
		fmt.Fprintln(os.Stderr, "ncclperf:", err)
		if cli.IsUsage(err) {
			fmt.Fprintln(os.Stderr, "ncclperf: 'ncclperf -h' lists the flags")
		}
		if errors.Is(err, cuda.ErrNoDriver) {
			fmt.Fprintln(os.Stderr, "ncclperf:", noDriverHint)
		}
	}
	os.Exit(cli.ExitCode(err))
}

// createProfile creates path (path.N for rank N > 0 of a launched job) and
// starts writing a profile or trace to it.
func createProfile(path string, place *launch.Place, start func(io.Writer) error) (*os.File, error) {
	if place != nil && place.Rank > 0 {
		path += "." + strconv.Itoa(place.Rank)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// rankBuffers are one rank's context, stream and device buffers.
type rankBuffers struct {
	ctx        *cuda.Context
	send, recv cuda.DevicePtr
	stream     *cuda.Stream
}

// run measures every job through ncclgo, then (with -compare) through the
// NCCL library, and prints a table per job. The two libraries never live in
// the process at the same time: ncclgo's communicators are destroyed before
// NCCL's are created, so nothing of one runs while the other is timed.
// Every call comes from this goroutine, locked to its OS thread, as
// nccl-tests -t 1 issues them from its one thread. A process that a
// launcher started (c.place) runs its one rank of the job (runRank).
func run(c *config, w io.Writer) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.seed = chooseSeed()
	if c.place != nil {
		return runRank(c, w)
	}
	n, err := deviceCount()
	if err != nil {
		return err
	}
	if c.devices == nil {
		c.devices = placeRanks(c.nRanks, n)
	}
	if c.graphLaunches != 0 {
		return c.measureGraph(w, c.devices)
	}
	return c.measure(w, c.devices)
}

// deviceCount initialises CUDA and counts the visible devices; tests
// replace it.
var deviceCount = func() (int, error) {
	if err := cuda.Init(); err != nil {
		return 0, err
	}
	return cuda.DeviceCount()
}

// openRanks makes a context and stream on each device, for this process's
// ranks; release frees them. Tests replace it.
var openRanks = func(devices []int) (ranks []rankBuffers, release func(), err error) {
	ranks = make([]rankBuffers, len(devices))
	release = func() {
		for _, rb := range ranks {
			if rb.stream != nil {
				rb.stream.Destroy()
			}
			if rb.ctx != nil {
				rb.ctx.Release()
			}
		}
	}
	for r, d := range devices {
		dev, err := cuda.GetDevice(d)
		if err != nil {
			return ranks, release, err
		}
		if ranks[r].ctx, err = dev.PrimaryContext(); err != nil {
			return ranks, release, err
		}
		// nccl-tests: cudaStreamCreateWithFlags(cudaStreamNonBlocking) on
		// the device's primary context, which is what this is.
		if ranks[r].stream, err = ranks[r].ctx.NewStream(true); err != nil {
			return ranks, release, err
		}
	}
	return ranks, release, nil
}

// openOurs opens ncclgo's communicator; tests replace it.
var openOurs = func(c *config) (backend, error) { return openNcclgo(c) }

// openRef opens -compare's NCCL library on ranks; tests replace it.
var openRef = func(c *config, ranks []rankBuffers) (backend, error) {
	b, err := openNCCL(c.compare, c.devices, ranks, c.mp)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// measure runs the jobs on this process's ranks, on devices local (all of
// c.devices, or this rank's alone under a launcher).
func (c *config) measure(w io.Writer, local []int) error {
	ranks, release, err := openRanks(local)
	defer release()
	if err != nil {
		return err
	}

	jobs := c.jobs()
	ours := make([]jobResult, len(jobs))
	var oursName string
	if c.ncclgo {
		b, err := openOurs(c)
		if err != nil {
			return err
		}
		oursName = b.Name()
		err = c.measureAll(b, ranks, jobs, func(j int, t *table) error {
			if c.compare == "" {
				t.ours = oursName
				if j > 0 {
					fmt.Fprintln(w)
				}
				t.header(w)
			}
			serr := t.c.sweep(b, ranks, true, func(rw row) {
				ours[j].rows = append(ours[j].rows, rw)
				if c.compare == "" {
					t.row(w, rw, nil)
				}
			})
			ours[j].err = serr
			if c.compare == "" {
				ours[j].err = t.footer(w, serr)
			}
			return c.fatal(serr)
		})
		if cerr := c.closeBackend(b, err); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if c.compare != "" {
		b, err := openRef(c, ranks)
		if err != nil {
			return err
		}
		err = c.measureAll(b, ranks, jobs, func(j int, t *table) error {
			t.ours, t.ref = oursName, b.Name()
			if j > 0 {
				fmt.Fprintln(w)
			}
			t.header(w)
			if c.ncclgo && len(ours[j].rows) < t.c.cycles*len(t.c.sizes()) {
				// ncclgo failed part-way: its rows, and no reference.
				for _, rw := range ours[j].rows {
					t.row(w, rw, nil)
				}
				ours[j].err = t.footer(w, ours[j].err)
				return nil
			}
			k := 0
			// In-place too, as nccl-tests and ncclgo's sweep time it,
			// though only the out-of-place column is printed next to
			// ncclgo's.
			err := t.c.sweep(b, ranks, true, func(rw row) {
				if !c.ncclgo {
					t.row(w, rw, nil)
					return
				}
				t.row(w, ours[j].rows[k], &rw)
				k++
			})
			if err != nil {
				err = fmt.Errorf("reference: %w", err)
			}
			ours[j].err = t.footer(w, errors.Join(ours[j].err, err))
			return c.fatal(err)
		})
		if cerr := c.closeBackend(b, err); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	var errs []error
	for j, r := range ours {
		if r.err != nil {
			if len(jobs) == 1 {
				return r.err
			}
			jb := jobs[j]
			errs = append(errs, fmt.Errorf("%s %s %s: %w", jb.coll, jb.dt, jb.op, r.err))
		}
	}
	return errors.Join(errs...)
}

// jobResult is ncclgo's measurement of one job.
type jobResult struct {
	rows []row
	err  error
}

// measureAll gives b device buffers on every rank, large enough for
// nccl-tests' per-iteration offsets at every size (-e bytes each), and calls
// each for every job; the buffers are freed before it returns.
func (c *config) measureAll(b backend, ranks []rankBuffers, jobs []job, each func(j int, t *table) error) (err error) {
	defer func() {
		for r := range ranks {
			for _, p := range []*cuda.DevicePtr{&ranks[r].send, &ranks[r].recv} {
				if *p != 0 {
					if ferr := b.Free(r, ranks[r].ctx, *p); err == nil {
						err = ferr
					}
					*p = 0
				}
			}
		}
	}()
	n := uint64(max(c.maxBytes, 16))
	for r := range ranks {
		if ranks[r].send, err = b.Alloc(r, ranks[r].ctx, n); err != nil {
			return err
		}
		if ranks[r].recv, err = b.Alloc(r, ranks[r].ctx, n); err != nil {
			return err
		}
	}
	for j, jb := range jobs {
		if err := each(j, &table{c: c.forJob(jb)}); err != nil {
			return err
		}
	}
	return nil
}

// fatal is the error that ends the run: with ranks in other processes, a
// sweep that failed on this rank (the others wait for it in vain) ends
// the job, and so does a communicator's asynchronous error; otherwise the
// next job runs.
func (c *config) fatal(sweepErr error) error {
	if c.mp != nil || stranded(sweepErr) {
		return sweepErr
	}
	return nil
}

// stranded reports whether err leaves communicators that may never finish
// their work: it is or wraps a communicator's asynchronous error, or
// drain gave up waiting (-T).
func stranded(err error) bool {
	var ae *asyncError
	var se *stuckError
	return errors.As(err, &ae) || errors.As(err, &se)
}

// aborter is a backend whose communicators can be abandoned without
// waiting for their work (after a rank of another process was lost).
type aborter interface{ Abort() error }

// closeBackend closes b, or aborts it when the run failed with ranks in
// other processes (its kernels may wait for a rank that is gone) or on an
// asynchronous error (as nccl-tests aborts its communicators then).
func (c *config) closeBackend(b backend, runErr error) error {
	if a, ok := b.(aborter); ok && runErr != nil && (c.mp != nil || stranded(runErr)) {
		return a.Abort()
	}
	return b.Close()
}

// placeRanks puts n ranks round-robin on the visible GPUs: one rank per GPU
// when n does not exceed them.
func placeRanks(n, visible int) []int {
	devs := make([]int, n)
	for r := range devs {
		devs[r] = r % max(visible, 1)
	}
	return devs
}

// ratio compares ncclgo's out-of-place result with the reference's at a
// size (bytes of the size column): > 1 when ncclgo is better. Below
// ratioSplit it is the reference's time over ncclgo's, from there ncclgo's
// busbw over the reference's.
func ratio(size int64, oursUsec, oursBus, refUsec, refBus float64) (float64, string) {
	if size < ratioSplit || oursBus == 0 || refBus == 0 {
		if oursUsec == 0 {
			return math.NaN(), "time"
		}
		return refUsec / oursUsec, "time"
	}
	return oursBus / refBus, "busbw"
}

func (c *config) next(size int64) int64 {
	if c.step > 0 {
		return size + c.step
	}
	if size == 0 {
		return 1
	}
	return size * c.factor
}

// elemsPerCount is how many counts one "size" covers: nccl-tests sizes
// allgather, reducescatter and alltoall by the whole buffer, nRanks chunks
// of count.
func (c *config) elemsPerCount() int64 {
	return max(c.coll.blocks(c.nRanks))
}

// countFor is the count argument of the collective for a size in bytes,
// by nccl-tests' rules (each collective's GetCollByteCount): size /
// typesize elements for AllReduce, Broadcast, Reduce and SendRecv; for
// AllGather, ReduceScatter and AllToAll, whose size is the whole buffer of
// nRanks chunks, the chunk, rounded down to a multiple of 16 bytes. The
// count is 0 when a chunk rounds to nothing (AllGather of 8 or 16 B on 2
// ranks): nccl-tests then prints a 0-byte row of no-ops, which ncclperf
// leaves out (see sizes).
func (c *config) countFor(size int64) int64 {
	ts := int64(c.dt.size())
	count := size / ts
	if per := c.elemsPerCount(); per > 1 {
		count = (count / per) &^ (max(16/ts, 1) - 1)
	}
	return count
}

// rowBytes is nccl-tests' size column for count: the larger of one rank's
// send and receive bytes.
func (c *config) rowBytes(count int64) int64 {
	return count * int64(c.dt.size()) * c.elemsPerCount()
}

// bufferBytes is what each rank's send and receive buffers need for size.
func (c *config) bufferBytes(size int64) (send, recv int64) {
	return c.countBytes(c.countFor(size))
}

// countBytes is what each rank sends and receives for the count argument
// count.
func (c *config) countBytes(n int64) (send, recv int64) {
	count := n * int64(c.dt.size())
	s, r := c.coll.blocks(c.nRanks)
	return count * s, count * r
}

type result struct {
	usec, algbw, busbw float64
	hostUsec           float64 // the enqueue loop alone, per iteration
	wrong              int
}

// sendCount is the number of elements each rank sends.
func (c *config) sendCount(count int64) int64 {
	s, _ := c.coll.blocks(c.nRanks)
	return count * s
}

// fillChunk is the most elements of one rank's input that the host encodes
// and uploads; fillValue is periodic over it.
const fillChunk = 6 << 16

// fill writes every rank's input: fillValue is periodic in i (period fillChunk), so
// the host uploads at most fillChunk elements and the device doubles them
// to the full count.
func (c *config) fill(ranks []rankBuffers, send []cuda.DevicePtr, count int64) error {
	n := c.sendCount(count)
	if n == 0 {
		return nil
	}
	ts := int64(c.dt.size())
	for r, rb := range ranks {
		first := min(n, fillChunk)
		vals := make([]float64, first)
		for i := range vals {
			vals[i] = fillValue(c.seed.Value, c.rank0+r, i, c.op)
		}
		b := encode(c.dt, vals)
		if err := rb.ctx.MemcpyHtoD(send[r], unsafe.Pointer(&b[0]), uint64(len(b))); err != nil {
			return err
		}
		for have := first; have < n; {
			k := min(have, n-have)
			if err := rb.ctx.MemcpyDtoD(send[r]+cuda.DevicePtr(have*ts), send[r], uint64(k*ts)); err != nil {
				return err
			}
			have += k
		}
		// Device-to-device copies do not wait for the host: finish them
		// before the collective's streams read the buffer.
		if err := rb.ctx.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// checkWindows are the element ranges of an output of n elements that the
// check reads: all of it up to maxElems, else sampleWindows windows of
// windowElems spread evenly, plus windows around each of the boundaries
// (chunk boundaries of AllGather's output).
func checkWindows(n, maxElems int64, boundaries []int64) [][2]int64 {
	if n <= maxElems {
		return [][2]int64{{0, n}}
	}
	const sampleWindows, windowElems = 33, 1 << 16
	var starts []int64
	for i := range int64(sampleWindows) {
		starts = append(starts, i*(n-windowElems)/(sampleWindows-1))
	}
	for _, b := range boundaries {
		starts = append(starts, min(max(b-windowElems/2, 0), n-windowElems))
	}
	slices.Sort(starts)
	var out [][2]int64
	for _, st := range starts {
		end := st + windowElems
		if k := len(out); k > 0 && st <= out[k-1][1] {
			out[k-1][1] = max(out[k-1][1], end)
			continue
		}
		out = append(out, [2]int64{st, end})
	}
	return out
}

// reduceAt reduces element i of every rank's send buffer.
func (c *config) reduceAt(i int) float64 {
	n := c.nRanks
	acc := fillValue(c.seed.Value, 0, i, c.op)
	for r := 1; r < n; r++ {
		v := fillValue(c.seed.Value, r, i, c.op)
		switch c.op {
		case opSum, opAvg:
			acc += v
		case opProd:
			acc *= v
		case opMax:
			acc = math.Max(acc, v)
		case opMin:
			acc = math.Min(acc, v)
		}
	}
	if c.op == opAvg {
		acc /= float64(n)
		if !c.dt.isFloat() {
			acc = math.Floor(acc)
		}
	}
	return acc
}

func (c *config) verify(ranks []rankBuffers, recv []cuda.DevicePtr, count int64) (int, error) {
	ts := int64(c.dt.size())
	wrong := 0
	rounded := map[float64]float64{} // want → want in c.dt
	for lr, rb := range ranks {
		r := c.rank0 + lr
		_, blocks := c.coll.blocks(c.nRanks)
		n := count * blocks
		var bounds []int64 // between the blocks of recv
		for k := int64(1); k < blocks; k++ {
			bounds = append(bounds, k*count)
		}
		if c.coll == collReduce && r != c.root {
			continue
		}
		if n == 0 {
			continue
		}
		for _, win := range checkWindows(n, max(c.checkMax/ts, 1), bounds) {
			b := make([]byte, (win[1]-win[0])*ts)
			if err := rb.ctx.MemcpyDtoH(unsafe.Pointer(&b[0]), recv[lr]+cuda.DevicePtr(win[0]*ts), uint64(len(b))); err != nil {
				return 0, err
			}
			for j, g := range decode(c.dt, b) {
				i := int(win[0]) + j
				var want float64
				switch c.coll {
				case collAllReduce, collReduce:
					want = c.reduceAt(i)
				case collReduceScatter:
					want = c.reduceAt(r*int(count) + i)
				case collAllGather:
					want = fillValue(c.seed.Value, i/int(count), i%int(count), c.op)
				case collBroadcast:
					want = fillValue(c.seed.Value, c.root, i, c.op)
				case collSendRecv:
					want = fillValue(c.seed.Value, (r+c.nRanks-1)%c.nRanks, i, c.op)
				case collAllToAll:
					// Block j of our output is rank j's block r.
					want = fillValue(c.seed.Value, i/int(count), r*int(count)+i%int(count), c.op)
				}
				wr, ok := rounded[want]
				if !ok {
					wr = decode(c.dt, encode(c.dt, []float64{want}))[0]
					rounded[want] = wr
				}
				if tol := tolerance(c.dt, c.nRanks); math.Abs(g-wr) > tol*math.Max(1, math.Abs(wr)) || math.IsNaN(g) {
					wrong++
				}
			}
		}
	}
	return wrong, nil
}
