package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The timing loop is nccl-tests' (src/common.cu, TimeTest and BenchTime,
// with its defaults -z 0 -m 1 -G 0 -I 0), the same for ncclgo and NCCL:
//
//   - before the first size is timed, every size from -b to -e by a factor
//     of 2 runs -w out-of-place iterations, then the streams are drained;
//   - then -N cycles (default 1), each of every size in turn: out-of-place
//     then in-place (the reference's in-place too, though -compare prints
//     only its out-of-place column, so that every measurement follows the
//     same work as in nccl-tests and in ncclgo's sweep), each one untimed
//     iteration and a drain, then a host clock around -n iterations issued
//     back to back and the drain after them, divided by -n;
//   - with -c 1, where ncclperf departs from nccl-tests: the results of
//     the untimed iteration are checked before the timed loop (nccl-tests
//     checks a fresh iteration after it), and the check is followed by a
//     barrier of the job's processes (-np, mpirun, torchrun: the control
//     channel's; none in one process) and a second untimed iteration and
//     drain. A check takes each process its own time (whole outputs up to
//     -check-max), so without them a rank that finished early would start
//     its clock and its first iteration would wait on the GPU for the
//     late rank, counting the other's check as its own time (2 processes
//     under MPS, AllReduce -c 1: 8 MiB 1.6 ms and 64 MiB 4.8 ms, where -c 0
//     gives a smooth sweep; -w does not help, warm-ups run only before the
//     first size). The barrier keeps an early rank's kernel from spinning
//     on the GPU through the other's check; its release is only as even
//     as the control channel's messages, so the untimed iteration is what
//     aligns the clocks: it completes on every rank at once, and each
//     rank's clock starts as its drain sees that. In one process every
//     rank's check ends before any rank issues again, and the second
//     iteration only leaves the caches as -c 0 leaves them;
//   - -compare's library has the -n iterations issued from C in one cgo
//     call (-ref-loop=c), as nccl-tests issues them, so that Go's cost per
//     cgo call is not counted as NCCL's; ncclgo's are issued from Go, its
//     API;
//   - iteration i shifts both buffers by i modulo (-e / the size) times the
//     size, so that a buffer smaller than -e does not stay in cache;
//   - draining polls every stream (cudaStreamQuery) and, while one is
//     busy, its communicator's asynchronous error (ncclCommGetAsyncError),
//     yielding with sched_yield when a pass finds none finished, as
//     testStreamSynchronize does;
//   - no events are recorded (nccl-tests records them only for -I 1).

// row is one size's measurement: out-of-place and in-place.
type row struct {
	bytes, count int64
	oop, ip      result
	ipNA         bool // not measured: point-to-point, or a sweep without in-place
}

// sizes lists the sizes of the sweep (-b to -e by -f or -i), in bytes,
// leaving out those whose count is 0 (see countFor): nccl-tests prints
// them as 0-byte rows of no-ops, which measure nothing.
func (c *config) sizes() []int64 {
	var s []int64
	for size := c.minBytes; size <= c.maxBytes; size = c.next(size) {
		if c.countFor(size) > 0 {
			s = append(s, size)
		}
		if c.next(size) == size {
			break
		}
	}
	return s
}

// shift is nccl-tests' offset of both buffers at iteration iter: the
// buffers (-e bytes) hold steps = -e / total copies of the largest of the
// send and receive sizes, and iteration iter uses copy iter % steps.
func (c *config) shift(count int64, iter int) int64 {
	step, steps := c.shiftSteps(count)
	return step * (int64(iter) % steps)
}

// shiftSteps is shift's unit (the larger of the send and receive sizes) and
// the number of copies of it the buffers hold (at least 1).
func (c *config) shiftSteps(count int64) (step, steps int64) {
	send, recv := c.countBytes(count)
	step = max(send, recv)
	if step == 0 {
		return 0, 1
	}
	return step, max(c.maxBytes/step, 1)
}

// pointers writes every rank's send and receive pointers for count
// elements at iteration iter into send and recv.
func (c *config) pointers(ranks []rankBuffers, count int64, inPlace bool, iter int, send, recv []cuda.DevicePtr) {
	ts := int64(c.dt.size())
	sh := cuda.DevicePtr(c.shift(count, iter))
	for lr, rb := range ranks {
		r := c.rank0 + lr // the communicator rank
		s, d := rb.send+sh, rb.recv+sh
		if inPlace {
			switch c.coll {
			case collAllGather:
				s = d + cuda.DevicePtr(int64(r)*count*ts)
			case collReduceScatter:
				// nccl-tests: both in the receive buffer, which
				// holds the whole input.
				s = d
				d = s + cuda.DevicePtr(int64(r)*count*ts)
			default:
				s = d
			}
		}
		send[lr], recv[lr] = s, d
	}
}

// sweep measures every size through b and hands each row to emit: first
// nccl-tests' warm-up of every size, then each size out-of-place and, with
// inPlace and a collective that has the form, in-place.
func (c *config) sweep(b backend, ranks []rankBuffers, inPlace bool, emit func(row)) error {
	return newIterator(c, b, ranks).sweep(inPlace, emit)
}

func (it *iterator) sweep(inPlace bool, emit func(row)) error {
	c := it.c
	if len(c.sizes()) == 0 {
		return fmt.Errorf("-b %d to -e %d: no size with a non-zero %s count on %d ranks (each rank's chunk is rounded down to 16 bytes, as nccl-tests does); raise -e",
			c.minBytes, c.maxBytes, c.coll, c.nRanks)
	}
	if err := it.warmUp(); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for range max(c.cycles, 1) {
		if err := it.sizes(inPlace, emit); err != nil {
			return err
		}
	}
	return nil
}

// sizes measures one cycle: every size, each handed to emit.
func (it *iterator) sizes(inPlace bool, emit func(row)) error {
	c := it.c
	for _, size := range c.sizes() {
		count := c.countFor(size)
		rw := row{bytes: c.rowBytes(count), count: count, ipNA: !inPlace || c.coll.p2p()}
		var err error
		if rw.oop, err = it.bench(count, false); err != nil {
			return fmt.Errorf("size %d, out-of-place: %w", size, err)
		}
		if !rw.ipNA {
			if rw.ip, err = it.bench(count, true); err != nil {
				return fmt.Errorf("size %d, in-place: %w", size, err)
			}
		}
		if c.mp != nil {
			// nccl-tests with MPI: every rank's time and wrong
			// count combined, per size.
			if rw, err = c.mp.combine(c, rw); err != nil {
				return fmt.Errorf("size %d: %w", size, err)
			}
		}
		emit(rw)
	}
	return nil
}

// iterator issues iterations of one job through one backend.
type iterator struct {
	c          *config
	b          backend
	ranks      []rankBuffers
	send, recv []cuda.DevicePtr
	streams    []*cuda.Stream
	graphNodes []int // -G: the node count of each rank's last captured graph
	// done reports whether rank r's stream is idle (cuStreamQuery); tests
	// replace it.
	done func(r int) (bool, error)
	// fill writes the inputs of count elements at it.send, verify counts
	// the wrong values at it.recv (config's fill and verify), and barrier
	// waits for every process of the job (nothing in one process); tests
	// replace them.
	fill    func(count int64) error
	verify  func(count int64) (int, error)
	barrier func() error
}

func newIterator(c *config, b backend, ranks []rankBuffers) *iterator {
	it := &iterator{c: c, b: b, ranks: ranks,
		send: make([]cuda.DevicePtr, len(ranks)), recv: make([]cuda.DevicePtr, len(ranks)),
		streams: make([]*cuda.Stream, len(ranks))}
	for r := range ranks {
		it.streams[r] = ranks[r].stream
	}
	it.done = func(r int) (bool, error) { return streamIdle(it.streams[r]) }
	it.fill = func(count int64) error { return c.fill(it.ranks, it.send, count) }
	it.verify = func(count int64) (int, error) { return c.verify(it.ranks, it.recv, count) }
	it.barrier = func() error { return c.mp.barrier() }
	return it
}

// streamIdle reports whether s has finished its work (cuStreamQuery);
// tests replace it.
var streamIdle = func(s *cuda.Stream) (bool, error) { return s.Query() }

// start issues iteration iter (nccl-tests' startColl): one group of every
// rank's call.
func (it *iterator) start(count int64, inPlace bool, iter int) error {
	c := it.c
	c.pointers(it.ranks, count, inPlace, iter, it.send, it.recv)
	return it.b.Run(c.coll, it.send, it.recv, int(count), c.dt, c.op, c.root, it.streams)
}

// warmUp runs -w out-of-place iterations at every size from -b to -e by a
// factor of 2, draining the streams after each size (sizes of count 0,
// no-ops in NCCL, are left out).
func (it *iterator) warmUp() error {
	c := it.c
	if c.warmup == 0 {
		return nil
	}
	if err := it.b.Begin(); err != nil {
		return err
	}
	for size := c.minBytes; size <= c.maxBytes; size = max(size*2, 1) {
		count := c.countFor(size)
		if count == 0 {
			continue
		}
		for i := range c.warmup {
			if err := it.start(count, false, i); err != nil {
				return fmt.Errorf("size %d: %w", size, err)
			}
		}
		if err := it.drain(); err != nil {
			return err
		}
	}
	return nil
}

// untimed issues iteration 0 and drains it: the iteration before a timed
// loop, which ends at once on every rank.
func (it *iterator) untimed(count int64, inPlace bool) error {
	if err := it.b.Begin(); err != nil {
		return err
	}
	if err := it.start(count, inPlace, 0); err != nil {
		return err
	}
	return it.drain()
}

// bench times one size and placement (nccl-tests' BenchTime; with -c 1,
// the check and the realignment after it, see the top of this file).
func (it *iterator) bench(count int64, inPlace bool) (result, error) {
	c := it.c
	var res result
	if c.check {
		c.pointers(it.ranks, count, inPlace, 0, it.send, it.recv)
		if err := it.fill(count); err != nil {
			return res, err
		}
	}
	if err := it.untimed(count, inPlace); err != nil {
		return res, err
	}
	if c.check {
		wrong, err := it.verify(count)
		if err != nil {
			return res, err
		}
		res.wrong = wrong
		// Each process's check took its own time: meet, then let
		// an untimed iteration align the ranks on the GPU.
		if err := it.barrier(); err != nil {
			return res, fmt.Errorf("barrier after the check: %w", err)
		}
		if err := it.untimed(count, inPlace); err != nil {
			return res, err
		}
		if err := it.b.Begin(); err != nil {
			return res, err
		}
	}
	start := time.Now()
	if l, ok := it.b.(looper); ok && c.refLoop == "c" {
		c.pointers(it.ranks, count, inPlace, 0, it.send, it.recv)
		step, steps := c.shiftSteps(count)
		if err := l.Loop(c.coll, it.send, it.recv, int(count), c.dt, c.op, c.root, it.streams, c.iters, step, steps); err != nil {
			return res, err
		}
	} else {
		for i := range c.iters {
			if err := it.start(count, inPlace, i); err != nil {
				return res, err
			}
		}
	}
	res.hostUsec = time.Since(start).Seconds() * 1e6 / float64(c.iters)
	if err := it.drain(); err != nil {
		return res, err
	}
	sec := time.Since(start).Seconds() / float64(c.iters)
	res.usec = sec * 1e6
	res.algbw, res.busbw = c.bandwidth(count, res.usec)
	return res, nil
}

// bandwidth is nccl-tests' algorithm and bus bandwidth (GB/s) of count
// elements in usec microseconds.
func (c *config) bandwidth(count int64, usec float64) (algbw, busbw float64) {
	algbw = float64(c.rowBytes(count)) / usec / 1e3
	return algbw, algbw * c.coll.busFactor(c.nRanks)
}

// drain waits until every stream is idle by polling them in turn, as
// nccl-tests' testStreamSynchronize does: a stream still busy has its
// rank's asynchronous error checked (when the backend reports one, see
// asyncErrer), and a pass that finds none newly finished yields the
// processor.
func (it *iterator) drain() error {
	done := make([]bool, len(it.streams))
	async, _ := it.b.(asyncErrer)
	start := time.Now()
	for remaining := len(it.streams); remaining > 0; {
		idle := true
		for i := range it.streams {
			if done[i] {
				continue
			}
			ok, err := it.done(i)
			if err != nil {
				return err
			}
			if ok {
				done[i] = true
				remaining--
				idle = false
				continue
			}
			if async != nil {
				if err := async.AsyncErr(i); err != nil {
					ae := &asyncError{rank: it.c.rank0 + i, err: err}
					if lost := it.c.mp.alive(); lost != nil {
						return fmt.Errorf("%w (%w)", lost, ae) // the lost rank is the cause
					}
					return ae
				}
			}
		}
		if idle {
			if err := it.c.mp.alive(); err != nil {
				return err // a rank this one waits for is gone
			}
			if t := it.c.timeout; t > 0 && time.Since(start) > t {
				return it.timedOut(done)
			}
			yield()
		}
	}
	return nil
}

// yield lets other threads have the processor while drain waits, keeping
// this thread runnable, as nccl-tests' std::this_thread::yield
// (sched_yield) does. runtime.Gosched is no substitute: on a goroutine
// locked to its thread, as run locks it, it parks the thread and hands its
// P to another thread, which must wake it back, so each pass costs two
// thread switches and may resume the thread on another CPU. Other
// goroutines still run: on the other Ps, and on this one through the
// runtime's preemption. Tests replace it.
var yield = func() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// looper is a backend that can issue a whole timed loop in one call
// (-ref-loop=c): iters iterations, iteration i's pointers those of
// iteration 0 shifted by step * (i % steps) bytes (see config.shift).
type looper interface {
	Loop(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream, iters int, step, steps int64) error
}

// timedOut is drain's error when -T ran out: the ranks whose streams are
// still busy, and where their connections stand when the backend can say
// (stuckDumper).
func (it *iterator) timedOut(done []bool) error {
	e := &stuckError{after: it.c.timeout}
	for i, d := range done {
		if !d {
			e.ranks = append(e.ranks, it.c.rank0+i)
		}
	}
	if d, ok := it.b.(stuckDumper); ok {
		e.dump = d.Dump()
	}
	return e
}

// stuckError is drain giving up (-T): the run ends and the communicators
// are aborted, as after an asynchronous error.
type stuckError struct {
	after time.Duration
	ranks []int  // the communicator ranks whose streams were still busy
	dump  string // where their connections stood, if the backend could say
}

func (e *stuckError) Error() string {
	s := fmt.Sprintf("%s %v: the streams of ranks %v are still busy", flagName("T"), e.after, e.ranks)
	if e.dump != "" {
		s += "; connections:\n" + e.dump
	}
	return s
}

// stuckDumper is a backend that can say where its ranks' connections stand
// (ncclgo: internal/diag), for -T's error.
type stuckDumper interface {
	Dump() string
}

// asyncErrer is a backend that reports rank r's asynchronous error without
// waiting (ncclCommGetAsyncError, ncclgo's Comm.Err); drain polls it for
// each busy stream, as testStreamSynchronize does.
type asyncErrer interface {
	AsyncErr(r int) error
}

// asyncError is a rank's asynchronous error, found while draining: the
// communicators may never finish their work, so the run ends and they are
// aborted (closeBackend), as nccl-tests aborts them.
type asyncError struct {
	rank int // the communicator rank
	err  error
}

func (e *asyncError) Error() string {
	return fmt.Sprintf("rank %d: asynchronous error: %v", e.rank, e.err)
}

func (e *asyncError) Unwrap() error { return e.err }

// table prints one job's results in nccl-tests' columns: the measured
// library's out-of-place and in-place columns and, with a reference, the
// reference's out-of-place time and busbw and the ratio.
type table struct {
	c         *config
	ours, ref string // names; ours is "" when ncclgo is not run
	wrong     int
	refWrong  int
	busSum    float64
	n         int
}

func (t *table) header(w io.Writer) {
	c := t.c
	fmt.Fprintf(w, "# ncclperf: %s, %d ranks on devices %v, %s %s, -n %d -w %d -N %d\n", c.coll, c.nRanks, c.devices, c.dt, c.op, c.iters, c.warmup, max(c.cycles, 1))
	if c.place != nil {
		fmt.Fprintf(w, "# %d processes of one rank each (launcher: %s); time: %s (-a %d), #wrong: the sum over ranks\n",
			c.nRanks, c.place.Launcher, averageNames[c.average], c.average)
	}
	if t.ours != "" {
		fmt.Fprintf(w, "# ncclgo: %s\n", t.ours)
	}
	// Goroutines other than this one: none but the job's control channel's
	// should run beside the measured library.
	others := runtime.NumGoroutine() - 1
	if t.ref != "" && t.ours == "" {
		fmt.Fprintf(w, "# measured: %s (%s), timed as nccl-tests times it; %d other goroutines\n", t.ref, c.compare, others)
	}
	cmp := t.ref != "" && t.ours != ""
	if cmp {
		fmt.Fprintf(w, "# reference: %s (%s), measured after ncclgo's communicators were destroyed, its timed loop issued from %s; %d other goroutines\n",
			t.ref, c.compare, map[string]string{"c": "C (-ref-loop=c)", "go": "Go (-ref-loop=go)"}[c.refLoop], others)
		fmt.Fprintf(w, "# ratio (> 1: ncclgo better, out-of-place): below %d B NCCL time / ncclgo time, from %d B ncclgo busbw / NCCL busbw\n",
			ratioSplit, ratioSplit)
	}
	if c.check {
		fmt.Fprintf(w, "# check: whole outputs up to %d B per rank, sampled windows above; %s\n", c.checkMax, c.seed)
	}
	hdr := fmt.Sprintf("#%11s %12s %8s %6s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s", "size", "count", "type", "redop", "root",
		"time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	units := fmt.Sprintf("#%11s %12s %8s %6s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s", "(B)", "(elements)", "", "", "",
		"(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	if cmp {
		hdr += fmt.Sprintf("   %9s %7s %7s %5s", "nccl(us)", "busbw", "ratio", "by")
		units += fmt.Sprintf("   %9s %7s %7s %5s", "oop", "(GB/s)", "(>1 ok)", "")
	}
	fmt.Fprintf(w, "#%s\n%s\n%s\n", strings.Repeat(" ", 10)+"out-of-place / in-place", hdr, units)
}

// row prints rw (the measured library's) and, when ref is not nil, the
// reference's out-of-place result and the ratio.
func (t *table) row(w io.Writer, rw row, ref *row) {
	c := t.c
	op, root := c.op.String(), c.root
	if !c.coll.reduces() {
		op = "none"
	}
	if c.coll != collBroadcast && c.coll != collReduce {
		root = -1
	}
	line := fmt.Sprintf("%12d %12d %8s %6s %6d", rw.bytes, rw.count, c.dt, op, root)
	for i, res := range []result{rw.oop, rw.ip} {
		if i == 1 && rw.ipNA {
			line += fmt.Sprintf("   %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		t.wrong += res.wrong
		wrong := strconv.Itoa(res.wrong)
		if !c.check {
			wrong = "N/A"
		}
		line += fmt.Sprintf("   %9.2f %7.2f %7.2f %6s", res.usec, res.algbw, res.busbw, wrong)
	}
	t.busSum += rw.oop.busbw
	t.n++
	var refHost string
	if ref != nil {
		t.refWrong += ref.oop.wrong
		if !ref.ipNA {
			t.refWrong += ref.ip.wrong // not printed, but checked
		}
		q, by := ratio(rw.bytes, rw.oop.usec, rw.oop.busbw, ref.oop.usec, ref.oop.busbw)
		line += fmt.Sprintf("   %9.2f %7.2f %7.3f %5s", ref.oop.usec, ref.oop.busbw, q, by)
		refHost = fmt.Sprintf(", reference %.2f", ref.oop.hostUsec)
	}
	if c.hostTime {
		line += fmt.Sprintf("\n#%11d host enqueue (us/iter): %s %.2f%s", rw.bytes, map[bool]string{true: "ncclgo", false: "NCCL"}[t.ours != ""], rw.oop.hostUsec, refHost)
	}
	fmt.Fprintln(w, line)
}

// footer prints nccl-tests' summary lines and err, and returns err joined
// with an error for wrong values.
func (t *table) footer(w io.Writer, err error) error {
	if err != nil {
		fmt.Fprintf(w, "# %s: %v\n", t.c.coll, err)
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", t.wrong, map[bool]string{true: "OK", false: "FAILED"}[t.wrong == 0])
	if t.refWrong > 0 {
		fmt.Fprintf(w, "# Out of bounds values in the reference's column : %d FAILED\n", t.refWrong)
	}
	avg := t.busSum / float64(max(t.n, 1))
	if math.IsNaN(avg) {
		avg = 0
	}
	fmt.Fprintf(w, "# Avg bus bandwidth    : %g\n", avg)
	if t.wrong > 0 {
		err = errors.Join(err, fmt.Errorf("%d wrong values", t.wrong))
	}
	if t.refWrong > 0 {
		err = errors.Join(err, fmt.Errorf("reference: %d wrong values", t.refWrong))
	}
	return err
}
