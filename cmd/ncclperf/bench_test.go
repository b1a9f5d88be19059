package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeBackend logs what the timing loop asks of it.
type fakeBackend struct {
	log        []string
	sendBase   cuda.DevicePtr
	recvBase   cuda.DevicePtr
	failAtCall int // Run fails on this call (1-based); 0 never
	calls      int
}

func (f *fakeBackend) Name() string { return "fake" }
func (f *fakeBackend) Begin() error { f.log = append(f.log, "begin"); return nil }
func (f *fakeBackend) Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error {
	f.calls++
	if f.calls == f.failAtCall {
		return fmt.Errorf("fake failure")
	}
	var parts []string
	for r := range send {
		parts = append(parts, fmt.Sprintf("%d:%d", send[r]-f.sendBase, recv[r]-f.recvBase))
	}
	f.log = append(f.log, fmt.Sprintf("run %d %s", count, strings.Join(parts, ",")))
	return nil
}
func (f *fakeBackend) Alloc(int, *cuda.Context, uint64) (cuda.DevicePtr, error) { return 0, nil }
func (f *fakeBackend) Free(int, *cuda.Context, cuda.DevicePtr) error            { return nil }
func (f *fakeBackend) Close() error                                             { return nil }

// fakeIterator is an iterator over two ranks whose streams are idle on the
// second poll, logging each drain.
func fakeIterator(c *config, f *fakeBackend) *iterator {
	f.sendBase, f.recvBase = 1<<20, 1<<30
	ranks := []rankBuffers{{send: f.sendBase, recv: f.recvBase}, {send: f.sendBase, recv: f.recvBase}}
	it := newIterator(c, f, ranks)
	polls := make([]int, len(ranks))
	it.done = func(r int) (bool, error) {
		polls[r]++
		if polls[r]%2 == 0 {
			f.log = append(f.log, fmt.Sprintf("idle %d", r))
			return true, nil
		}
		return false, nil
	}
	return it
}

// TestTimingLoopIsNcclTests checks the order of calls against nccl-tests'
// TimeTest and BenchTime: every size warmed up (factor 2) before the first
// is timed, then per size and placement one untimed iteration and a drain,
// then -n iterations back to back and one drain; buffers shifted by the
// size per iteration, modulo what -e holds.
func TestTimingLoopIsNcclTests(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 32, factor: 4, iters: 3, warmup: 2}
	f := &fakeBackend{}
	var rows []row
	require.NoError(t, fakeIterator(c, f).sweep(true, func(rw row) { rows = append(rows, rw) }))
	drain := []string{"idle 0", "idle 1"}
	var want []string
	add := func(s ...string) { want = append(want, s...) }
	add("begin")
	// Warm-up: 8, 16, 32 B (2, 4, 8 floats), shifts of one size each.
	add("run 2 0:0,0:0", "run 2 8:8,8:8")
	add(drain...)
	add("run 4 0:0,0:0", "run 4 16:16,16:16")
	add(drain...)
	add("run 8 0:0,0:0", "run 8 0:0,0:0")
	add(drain...)
	// 8 B out-of-place, then in-place (send = recv).
	add("begin", "run 2 0:0,0:0")
	add(drain...)
	add("run 2 0:0,0:0", "run 2 8:8,8:8", "run 2 16:16,16:16")
	add(drain...)
	ip := func(off int) string {
		return fmt.Sprintf("run 2 %d:%d,%d:%d", off+(1<<30)-(1<<20), off, off+(1<<30)-(1<<20), off)
	}
	add("begin", ip(0))
	add(drain...)
	add(ip(0), ip(8), ip(16))
	add(drain...)
	// 32 B: -e holds one copy, so no shift.
	add("begin", "run 8 0:0,0:0")
	add(drain...)
	add("run 8 0:0,0:0", "run 8 0:0,0:0", "run 8 0:0,0:0")
	add(drain...)
	add("begin", "run 8 1072693248:0,1072693248:0")
	add(drain...)
	add("run 8 1072693248:0,1072693248:0", "run 8 1072693248:0,1072693248:0", "run 8 1072693248:0,1072693248:0")
	add(drain...)
	assert.Equal(t, want, f.log)
	require.Len(t, rows, 2)
	assert.Equal(t, int64(8), rows[0].bytes)
	assert.Equal(t, int64(2), rows[0].count)
	assert.False(t, rows[0].ipNA)
	assert.Greater(t, rows[0].oop.usec, 0.0)
	assert.Greater(t, rows[1].ip.usec, 0.0)
}

// TestTimingLoopCheckRealigns: with -c 1 each placement fills, runs the
// untimed iteration and checks it, then meets the job's other processes
// (barrier) and runs a second untimed iteration and drain before the
// clock starts, so that no rank's timed loop holds another's check.
func TestTimingLoopCheckRealigns(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 8, factor: 2, iters: 2, check: true}
	f := &fakeBackend{}
	it := fakeIterator(c, f)
	it.fill = func(count int64) error { f.log = append(f.log, fmt.Sprintf("fill %d", count)); return nil }
	it.verify = func(count int64) (int, error) { f.log = append(f.log, fmt.Sprintf("verify %d", count)); return 1, nil }
	it.barrier = func() error { f.log = append(f.log, "barrier"); return nil }
	var rows []row
	require.NoError(t, it.sweep(false, func(rw row) { rows = append(rows, rw) }))
	drain := []string{"idle 0", "idle 1"}
	var want []string
	add := func(s ...string) { want = append(want, s...) }
	add("fill 2", "begin", "run 2 0:0,0:0")
	add(drain...)
	add("verify 2", "barrier", "begin", "run 2 0:0,0:0")
	add(drain...)
	add("begin", "run 2 0:0,0:0", "run 2 0:0,0:0")
	add(drain...)
	assert.Equal(t, want, f.log)
	require.Len(t, rows, 1)
	assert.Equal(t, 1, rows[0].oop.wrong)

	assert.NoError(t, (*mpRank)(nil).barrier(), "one process: no barrier")

	// A failed barrier (a rank lost) ends the sweep, naming the size.
	f = &fakeBackend{}
	it = fakeIterator(c, f)
	it.fill = func(int64) error { return nil }
	it.verify = func(int64) (int, error) { return 0, nil }
	it.barrier = func() error { return errors.New("rank 1 lost") }
	assert.ErrorContains(t, it.sweep(false, func(row) {}), "size 8, out-of-place: barrier after the check: rank 1 lost")
}

// fakeJob simulates one collective over processes of one rank each: a
// process's call completes once every process has issued its matching
// call, as on the GPU.
type fakeJob struct {
	mu     sync.Mutex
	issued []int // calls issued, per process
}

// fakeProc is one process's backend in a fakeJob.
type fakeProc struct {
	fakeBackend
	job *fakeJob
	p   int
}

func (f *fakeProc) Run(coll, []cuda.DevicePtr, []cuda.DevicePtr, int, dataType, redOp, int, []*cuda.Stream) error {
	f.job.mu.Lock()
	defer f.job.mu.Unlock()
	f.job.issued[f.p]++
	return nil
}

// idle reports whether every call process p issued has completed.
func (j *fakeJob) idle(p int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.issued[p] <= slices.Min(j.issued)
}

// TestTimingLoopChecksDoNotSkew runs two simulated processes whose checks
// take different times (process 1's 100 ms, process 0's none): process
// 0's time must not hold process 1's check. Without the barrier and the
// realigning iteration after the check, process 0's clock starts while
// process 1 still checks, and its first timed call waits for process 1's:
// 100 ms / -n 2 = 50 ms per iteration.
func TestTimingLoopChecksDoNotSkew(t *testing.T) {
	const slow = 100 * time.Millisecond
	job := &fakeJob{issued: make([]int, 2)}
	arrive := make(chan struct{}, 2)
	var meet sync.WaitGroup // the processes' barrier, used once per placement
	meet.Add(2)
	rows := make([]row, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, rank0: p, minBytes: 8, maxBytes: 8, factor: 2, iters: 2, check: true}
			f := &fakeProc{job: job, p: p}
			it := newIterator(c, f, []rankBuffers{{send: 1 << 20, recv: 1 << 30}})
			it.done = func(int) (bool, error) { return job.idle(p), nil }
			it.fill = func(int64) error { return nil }
			it.verify = func(int64) (int, error) {
				if p == 1 {
					time.Sleep(slow)
				}
				return 0, nil
			}
			it.barrier = func() error {
				arrive <- struct{}{}
				meet.Done()
				meet.Wait()
				return nil
			}
			errs[p] = it.sweep(false, func(rw row) { rows[p] = rw })
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for p, rw := range rows {
		t.Logf("process %d: %.1f us per iteration", p, rw.oop.usec)
		assert.Less(t, rw.oop.usec, float64(slow.Microseconds())/4, "process %d's time holds the other's check", p)
	}
	assert.Len(t, arrive, 2, "each process met the other once")
}

func TestTimingLoopOutOfPlaceOnly(t *testing.T) {
	// A sweep without in-place and point-to-point collectives time
	// out-of-place only; no warm-up with -w 0.
	for _, tc := range []struct {
		coll    coll
		inPlace bool
	}{{collAllReduce, false}, {collSendRecv, true}} {
		c := &config{coll: tc.coll, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 8, factor: 2, iters: 2}
		f := &fakeBackend{}
		var rows []row
		require.NoError(t, fakeIterator(c, f).sweep(tc.inPlace, func(rw row) { rows = append(rows, rw) }))
		assert.Equal(t, []string{"begin", "run 2 0:0,0:0", "idle 0", "idle 1", "run 2 0:0,0:0", "run 2 0:0,0:0", "idle 0", "idle 1"}, f.log, tc.coll)
		require.Len(t, rows, 1)
		assert.True(t, rows[0].ipNA)
	}
}

func TestTimingLoopError(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 32, factor: 2, iters: 2, warmup: 1}
	f := &fakeBackend{failAtCall: 5} // warm-up is 3 calls; the 5th is 8 B's first timed one
	err := fakeIterator(c, f).sweep(true, func(row) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "size 8, out-of-place: fake failure")
	f = &fakeBackend{failAtCall: 2}
	err = fakeIterator(c, f).sweep(true, func(row) {})
	assert.ErrorContains(t, err, "warm-up: size 16: fake failure")
}

func TestShiftAndPointers(t *testing.T) {
	// AllGather, 4 ranks, -e 1M: at 4 KiB (256 floats per rank in, 4 KiB
	// out) the buffers hold 256 copies.
	c := &config{coll: collAllGather, dt: float32T, nRanks: 4, maxBytes: 1 << 20}
	count := c.countFor(4096)
	assert.Equal(t, int64(0), c.shift(count, 0))
	assert.Equal(t, int64(4096), c.shift(count, 1))
	assert.Equal(t, int64(255*4096), c.shift(count, 255))
	assert.Equal(t, int64(0), c.shift(count, 256))
	ranks := make([]rankBuffers, 4)
	for r := range ranks {
		ranks[r] = rankBuffers{send: cuda.DevicePtr(r+1) << 32, recv: cuda.DevicePtr(r+1)<<32 + 1<<30}
	}
	send, recv := make([]cuda.DevicePtr, 4), make([]cuda.DevicePtr, 4)
	c.pointers(ranks, count, true, 1, send, recv)
	for r := range ranks {
		assert.Equal(t, ranks[r].recv+4096, recv[r])
		assert.Equal(t, recv[r]+cuda.DevicePtr(r*1024), send[r], "in-place AllGather: rank r's chunk of the output")
		assert.LessOrEqual(t, int64(recv[r]-ranks[r].recv)+4096, c.maxBytes, "within the -e bytes allocated")
	}
	// ReduceScatter of the same 4 KiB in: 64 floats out per rank, shifts
	// of 1 KiB (the larger of in and out).
	// In-place, both in the receive buffer (as nccl-tests: its offset 0
	// in, rank r's chunk out).
	c.coll = collReduceScatter
	c.pointers(ranks, count/4, true, 3, send, recv)
	for r := range ranks {
		assert.Equal(t, ranks[r].recv+3*1024, send[r])
		assert.Equal(t, send[r]+cuda.DevicePtr(r*256), recv[r])
	}
	c.pointers(ranks, count/4, false, 3, send, recv)
	for r := range ranks {
		assert.Equal(t, ranks[r].send+3*1024, send[r])
		assert.Equal(t, ranks[r].recv+3*1024, recv[r])
	}
}

// TestTimingLoopSkipsEmptySizes: AllGather of 8 and 16 B on 2 ranks has
// count 0 by nccl-tests' rule, so neither the warm-up nor the sweep runs
// it, and the first row is 32 B of 4 floats per rank.
func TestTimingLoopSkipsEmptySizes(t *testing.T) {
	c := &config{coll: collAllGather, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 32, factor: 2, iters: 1, warmup: 1}
	f := &fakeBackend{}
	var rows []row
	require.NoError(t, fakeIterator(c, f).sweep(false, func(rw row) { rows = append(rows, rw) }))
	assert.Equal(t, []string{"begin", "run 4 0:0,0:0", "idle 0", "idle 1",
		"begin", "run 4 0:0,0:0", "idle 0", "idle 1", "run 4 0:0,0:0", "idle 0", "idle 1"}, f.log)
	require.Len(t, rows, 1)
	assert.Equal(t, int64(32), rows[0].bytes)
	assert.Equal(t, int64(4), rows[0].count)

	c.maxBytes = 16
	f = &fakeBackend{}
	assert.ErrorContains(t, fakeIterator(c, f).sweep(false, func(row) {}), "no size with a non-zero allgather count on 2 ranks")
	assert.Empty(t, f.log)
}

func TestTable(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, op: opSum, nRanks: 2, devices: []int{0, 1}, iters: 5, warmup: 1, compare: "libnccl.so.2", hostTime: true}
	rw := row{bytes: 8, count: 2, oop: result{usec: 10, algbw: 0.0008, busbw: 0.0008, hostUsec: 4}, ip: result{usec: 11}}
	ref := row{bytes: 8, count: 2, oop: result{usec: 14, busbw: 0.0006, hostUsec: 6}, ipNA: true}
	var out bytes.Buffer
	tb := &table{c: c, ours: "2 ranks", ref: "NCCL 2.28.3"}
	tb.header(&out)
	tb.row(&out, rw, &ref)
	require.NoError(t, tb.footer(&out, nil))
	s := out.String()
	assert.Contains(t, s, "# reference: NCCL 2.28.3 (libnccl.so.2), measured after ncclgo's communicators were destroyed")
	assert.Regexp(t, `(?m)^ +8 +2 +float +sum +-1 +10\.00 .* 11\.00 .* 14\.00 +0\.00 +1\.400 +time$`, s)
	assert.Contains(t, s, "host enqueue (us/iter): ncclgo 4.00, reference 6.00")

	// NCCL alone: nccl-tests' columns, no ratio.
	out.Reset()
	c.hostTime = false
	tb = &table{c: c, ref: "NCCL 2.28.3"}
	tb.header(&out)
	tb.row(&out, ref, nil)
	require.NoError(t, tb.footer(&out, nil))
	s = out.String()
	assert.Contains(t, s, "# measured: NCCL 2.28.3 (libnccl.so.2)")
	assert.NotContains(t, s, "ratio")
	fields := strings.Fields(strings.Split(s, "\n")[5])
	require.Len(t, fields, 13, "nccl-tests' 13 columns")
	assert.Equal(t, "14.00", fields[5], "out-of-place time is column 6, as in nccl-tests")

	// nccl-tests' redop and root columns: "none" for a collective that
	// does not reduce, -1 for one without a root.
	for _, tc := range []struct {
		coll     coll
		op, root string
	}{{collAllGather, "none", "-1"}, {collReduceScatter, "sum", "-1"}, {collBroadcast, "none", "1"}, {collReduce, "sum", "1"}} {
		out.Reset()
		cc := *c
		cc.coll, cc.root = tc.coll, 1
		tb = &table{c: &cc, ref: "NCCL"}
		tb.row(&out, ref, nil)
		fields := strings.Fields(out.String())
		assert.Equal(t, []string{tc.op, tc.root}, fields[3:5], tc.coll)
	}

	// Wrong values fail the table, also in the reference's in-place
	// column, which is not printed.
	out.Reset()
	c.check = true
	tb = &table{c: c, ours: "x", ref: "NCCL"}
	tb.row(&out, rw, &row{bytes: 8, count: 2, oop: result{usec: 14}, ip: result{wrong: 2}})
	assert.ErrorContains(t, tb.footer(&out, nil), "reference: 2 wrong values")
	out.Reset()
	tb = &table{c: c, ours: "x"}
	tb.row(&out, row{bytes: 8, count: 2, oop: result{wrong: 3}, ipNA: true}, nil)
	assert.ErrorContains(t, tb.footer(&out, nil), "3 wrong values")
	assert.Contains(t, out.String(), "# Out of bounds values : 3 FAILED")
}

// TestRowsMatchNcclTestsOutput sweeps -b 8 -e 1G -f 2 on 2 ranks and checks
// the first five columns of every row against what all_reduce_perf and
// all_gather_perf printed for the same arguments (testdata; their 0-byte
// rows of no-ops, which ncclperf leaves out, aside).
func TestRowsMatchNcclTestsOutput(t *testing.T) {
	for file, k := range map[string]coll{"all_reduce_perf-2gpus.txt": collAllReduce, "all_gather_perf-2gpus.txt": collAllGather} {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		require.NoError(t, err)
		var want []string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 13 && f[0] != "0" && f[0][0] >= '0' && f[0][0] <= '9' {
				want = append(want, strings.Join(f[:5], " "))
			}
		}
		require.Len(t, want, map[coll]int{collAllReduce: 28, collAllGather: 26}[k], file)
		c := &config{coll: k, dt: float32T, op: opSum, nRanks: 2, minBytes: 8, maxBytes: 1 << 30, factor: 2}
		var got []string
		for _, size := range c.sizes() {
			count := c.countFor(size)
			var out bytes.Buffer
			(&table{c: c}).row(&out, row{bytes: c.rowBytes(count), count: count, ipNA: true}, nil)
			got = append(got, strings.Join(strings.Fields(out.String())[:5], " "))
		}
		assert.Equal(t, want, got, file)
	}
}

// asyncBackend is a fakeBackend that reports asynchronous errors: rank
// failRank's on its failAt-th query (1-based; 0 never).
type asyncBackend struct {
	fakeBackend
	queries          []int // per rank
	failRank, failAt int
	aborted          bool
}

func (b *asyncBackend) AsyncErr(r int) error {
	b.queries[r]++
	if b.failAt > 0 && r == b.failRank && b.queries[r] == b.failAt {
		return errors.New("unhandled cuda error")
	}
	return nil
}

func (b *asyncBackend) Abort() error { b.aborted = true; return nil }

// TestDrainIsTestStreamSynchronize checks drain against nccl-tests'
// testStreamSynchronize: each pass queries every busy stream and, for each
// one still busy, its rank's asynchronous error; a pass that finds none
// newly finished yields (sched_yield, which keeps the thread, instead of
// runtime.Gosched, which parks a locked one); an asynchronous error ends
// the drain naming the rank and makes the run end with the communicators
// aborted.
func TestDrainIsTestStreamSynchronize(t *testing.T) {
	yields := 0
	saved := yield
	yield = func() { yields++ }
	t.Cleanup(func() { yield = saved })

	c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, rank0: 4}
	b := &asyncBackend{queries: make([]int, 2)}
	it := newIterator(c, b, make([]rankBuffers, 2))
	var polls []string
	busy := []int{1, 3} // polls before each rank's stream is idle
	it.done = func(r int) (bool, error) {
		polls = append(polls, fmt.Sprint(r))
		if busy[r] == 0 {
			return true, nil
		}
		busy[r]--
		return false, nil
	}
	require.NoError(t, it.drain())
	// Pass 1: both busy (yield); pass 2: 0 idle, 1 busy (no yield: one
	// finished); pass 3: 1 busy (yield); pass 4: 1 idle.
	assert.Equal(t, []string{"0", "1", "0", "1", "1", "1"}, polls)
	assert.Equal(t, []int{1, 3}, b.queries, "the asynchronous error of each busy stream's rank, per pass")
	assert.Equal(t, 2, yields)

	b = &asyncBackend{queries: make([]int, 2), failRank: 1, failAt: 2}
	it.b = b
	busy = []int{0, 10}
	err := it.drain()
	var ae *asyncError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 5, ae.rank, "the communicator rank")
	assert.ErrorContains(t, err, "rank 5: asynchronous error: unhandled cuda error")
	wrapped := fmt.Errorf("size 8, out-of-place: %w", err)
	assert.Equal(t, wrapped, c.fatal(wrapped), "an asynchronous error ends the run")
	assert.NoError(t, c.fatal(errors.New("3 wrong values")), "other errors in one process do not")
	require.NoError(t, c.closeBackend(b, fmt.Errorf("size 8: %w", err)))
	assert.True(t, b.aborted, "communicators with an asynchronous error are aborted, as nccl-tests does")
	b.aborted = false
	require.NoError(t, c.closeBackend(b, nil))
	assert.False(t, b.aborted)
}

// TestDrainTimeout: with -T, drain gives up on streams still busy, naming
// their communicator ranks and where the backend says they stand; the run
// ends and the communicators are aborted.
func TestDrainTimeout(t *testing.T) {
	saved := yield
	yield = func() { time.Sleep(time.Millisecond) }
	t.Cleanup(func() { yield = saved })

	c := &config{coll: collAllReduce, dt: float32T, nRanks: 3, rank0: 4, timeout: 20 * time.Millisecond}
	b := &dumpBackend{asyncBackend: asyncBackend{queries: make([]int, 3), failRank: -1}}
	it := newIterator(c, b, make([]rankBuffers, 3))
	it.done = func(r int) (bool, error) { return r == 1, nil }
	start := time.Now()
	err := it.drain()
	var se *stuckError
	require.ErrorAs(t, err, &se)
	assert.GreaterOrEqual(t, time.Since(start), c.timeout)
	assert.Equal(t, []int{4, 6}, se.ranks, "the communicator ranks still busy")
	assert.EqualError(t, err, "-T/--timeout 20ms: the streams of ranks [4 6] are still busy; connections:\nch 0: 4 -> 5 stuck")
	wrapped := fmt.Errorf("size 8, out-of-place: %w", err)
	assert.Equal(t, wrapped, c.fatal(wrapped), "giving up ends the run")
	require.NoError(t, c.closeBackend(b, wrapped))
	assert.True(t, b.aborted, "communicators given up on are aborted")

	_, err = parseFlags([]string{"-T", "-1"}, io.Discard)
	assert.ErrorContains(t, err, "-T/--timeout -1: want a number of seconds, or 0 to wait for ever")
	c, err = parseFlags([]string{"--timeout", "30"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, c.timeout)
}

// dumpBackend says where its connections stand (stuckDumper).
type dumpBackend struct{ asyncBackend }

func (*dumpBackend) Dump() string { return "ch 0: 4 -> 5 stuck" }

// TestReferenceTimedLikeOurs: with -compare, NCCL's sweep issues exactly
// what ncclgo's does (warm-up, then out-of-place and in-place at every
// size, as nccl-tests), though only its out-of-place column is printed.
func TestReferenceTimedLikeOurs(t *testing.T) {
	savedRanks, savedIdle, savedOurs, savedRef := openRanks, streamIdle, openOurs, openRef
	t.Cleanup(func() { openRanks, streamIdle, openOurs, openRef = savedRanks, savedIdle, savedOurs, savedRef })
	openRanks = func(devices []int) ([]rankBuffers, func(), error) {
		return make([]rankBuffers, len(devices)), func() {}, nil
	}
	streamIdle = func(*cuda.Stream) (bool, error) { return true, nil }
	ours, ref := &fakeBackend{}, &fakeBackend{}
	openOurs = func(*config) (backend, error) { return ours, nil }
	openRef = func(*config, []rankBuffers) (backend, error) { return ref, nil }

	var errb bytes.Buffer
	c, err := parseFlags([]string{"-b", "8", "-e", "16", "-g", "2", "-n", "2", "-w", "1", "-c", "0", "-compare", "libnccl.so.2"}, &errb)
	require.NoError(t, err)
	c.devices = []int{0, 1}
	var out bytes.Buffer
	require.NoError(t, c.measure(&out, c.devices))
	// Warm-up 2 calls; per size and placement 1 untimed + 2 timed.
	assert.Len(t, ours.log, 1+2+2*2*(1+1+2))
	assert.Equal(t, ours.log, ref.log)
	assert.Regexp(t, `(?m)^# reference: fake \(libnccl.so.2\), measured after ncclgo's communicators were destroyed, its timed loop issued from C \(-ref-loop=c\); \d+ other goroutines$`, out.String())
	rows := regexp.MustCompile(`(?m)^ +(8|16) .* (time)$`).FindAllString(out.String(), -1)
	assert.Len(t, rows, 2, out.String())
}

// fakeLooper is a fakeBackend that issues -ref-loop=c's whole loop itself,
// logging each iteration as Run does.
type fakeLooper struct {
	fakeBackend
	loops int
}

func (f *fakeLooper) Loop(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream, iters int, step, steps int64) error {
	f.loops++
	s, d := make([]cuda.DevicePtr, len(send)), make([]cuda.DevicePtr, len(recv))
	for i := range iters {
		sh := cuda.DevicePtr(step * (int64(i) % steps))
		for r := range send {
			s[r], d[r] = send[r]+sh, recv[r]+sh
		}
		if err := f.Run(c, s, d, count, dt, op, root, streams); err != nil {
			return err
		}
	}
	return nil
}

// TestRefLoopCIssuesTheSameCalls checks that -ref-loop=c's loop in one call
// issues exactly the iterations (counts, shifted pointers, order) of the Go
// loop, for each collective's buffer shapes and in-place forms.
func TestRefLoopCIssuesTheSameCalls(t *testing.T) {
	for _, cl := range []coll{collAllReduce, collAllGather, collReduceScatter, collBroadcast} {
		c := &config{coll: cl, dt: float32T, nRanks: 2, minBytes: 64, maxBytes: 512, factor: 2, iters: 5, warmup: 1}
		goLoop := &fakeBackend{}
		require.NoError(t, fakeIterator(c, goLoop).sweep(true, func(row) {}))
		cc := *c
		cc.refLoop = "c"
		cLoop := &fakeLooper{}
		it := fakeIterator(&cc, &cLoop.fakeBackend)
		it.b = cLoop // the looper, not its embedded backend
		require.NoError(t, it.sweep(true, func(row) {}))
		assert.Equal(t, goLoop.log, cLoop.log, "%s", cl)
		assert.Equal(t, 2*len(c.sizes()), cLoop.loops, "%s: one Loop per size and placement", cl)
	}
}

// TestCyclesRepeatTheSweep checks -N as nccl-tests' -N: one warm-up, then
// the whole sweep of timed sizes N times, each row emitted.
func TestCyclesRepeatTheSweep(t *testing.T) {
	c := &config{coll: collAllReduce, dt: float32T, nRanks: 2, minBytes: 8, maxBytes: 32, factor: 4, iters: 2, warmup: 1}
	one := &fakeBackend{}
	var rows1 []row
	require.NoError(t, fakeIterator(c, one).sweep(true, func(rw row) { rows1 = append(rows1, rw) }))
	c3 := *c
	c3.cycles = 3
	three := &fakeBackend{}
	var rows3 []row
	require.NoError(t, fakeIterator(&c3, three).sweep(true, func(rw row) { rows3 = append(rows3, rw) }))
	require.Len(t, rows3, 3*len(rows1))
	for i, rw := range rows3 {
		assert.Equal(t, rows1[i%len(rows1)].bytes, rw.bytes, "row %d", i)
	}
	// The warm-up (up to the first "begin" of a timed size) runs once.
	warm := 0
	for warm < len(one.log) && (warm == 0 || one.log[warm] != "begin") {
		warm++
	}
	timed := one.log[warm:]
	want := append(append([]string{}, one.log[:warm]...), timed...)
	want = append(append(want, timed...), timed...)
	assert.Equal(t, want, three.log)
}
