// Package tests is ncclgo's GPU correctness suite: every built collective,
// reduction op, data type, algorithm and protocol, for several ranks sharing
// one GPU or spread over several, odd and unaligned sizes, in-place and
// out-of-place, randomized groups and placements (random_test.go). Data
// comes from internal/pattern: bytes unique to (seed, rank, index) for the
// data-moving calls, compared bit for bit, and non-periodic small integers
// for the reductions, whose results are exact in every type and compared
// bit for bit too (except a float Avg over a rank count that is not a
// power of two: each element must lie within the bound that every order
// of the device's roundings respects, pattern.Bound). Every
// byte of every rank's buffer is checked after each group, so a write
// outside an output, or one element past it, fails too. The seed changes
// every run and is printed; NCCLGO_TEST_SEED replays it.
//
// It skips, with the reason, where there is no CUDA driver or no kernel
// image. Knobs (environment):
//
//	NCCLGO_TEST_RANKS   rank counts, default "1,2,3,4,8"
//	NCCLGO_TEST_LARGE   1 adds the 64 Mi-element cases (default on)
//	NCCLGO_TEST_DEVICES device ordinals, e.g. "0,1,2,3": rank r runs on
//	                    the (r mod len)-th of them, so with as many ranks as
//	                    devices each rank has a GPU of its own; default "0"
//	                    (every rank on device 0)
//	NCCLGO_TEST_SEED    the data's seed (default: from the clock, printed)
//	NCCLGO_RANDOM_BUDGET how long TestRandom draws groups (Go duration;
//	                    default 30s, 10s with -test.short)
//	NCCLGO_TEST_WAIT    how long a group may take before it counts as hung
//	                    (Go duration; default 60s): the test then prints
//	                    which ranks' Wait returned and every connection's
//	                    counters (stderr, lines from HANG or STUCK), and
//	                    aborts
package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/internal/pattern"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

// gpu skips the test without a driver or a kernel image.
func gpu(t *testing.T) {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if _, src, err := kernels.FindImage(""); err != nil {
		t.Skipf("no kernel image (build one with `make kernels` or set %s): %v", kernels.EnvFatbin, err)
	} else {
		t.Logf("kernel image: %s", src)
	}
}

func rankCounts(t *testing.T) []int {
	s := os.Getenv("NCCLGO_TEST_RANKS")
	if s == "" {
		s = "1,2,3,4,8"
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "NCCLGO_TEST_RANKS=%q", s)
		out = append(out, n)
	}
	return out
}

// testDevices parses NCCLGO_TEST_DEVICES (default: device 0 only).
func testDevices(t *testing.T) []int {
	s := strings.TrimSpace(os.Getenv("NCCLGO_TEST_DEVICES"))
	if s == "" {
		return []int{0}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "NCCLGO_TEST_DEVICES=%q", s)
		require.GreaterOrEqual(t, d, 0, "NCCLGO_TEST_DEVICES=%q", s)
		out = append(out, d)
	}
	return out
}

// rankDevices places n ranks round-robin over devs.
func rankDevices(devs []int, n int) []int {
	out := make([]int, n)
	for r := range out {
		out[r] = devs[r%len(devs)]
	}
	return out
}

// world is one communicator of n ranks, placed on devices, with a stream
// and buffers per rank in its own device's context. send is each rank's
// arena for the group runner (calls_test.go); recv is a second buffer.
type world struct {
	t       *testing.T
	comms   []*ncclgo.Comm
	ctxs    []*cuda.Context // rank r's device's primary context
	streams []*cuda.Stream
	send    []cuda.DevicePtr
	recv    []cuda.DevicePtr
	size    uint64 // bytes of each buffer
	hung    bool   // a group did not complete: abort before destroying
}

// newWorld places n ranks on NCCLGO_TEST_DEVICES (round-robin).
func newWorld(t *testing.T, n int, algo, proto string, bufBytes uint64) *world {
	t.Helper()
	opts := &ncclgo.Options{}
	if algo != "" {
		opts.Overrides.Algo = &algo
	}
	if proto != "" {
		opts.Overrides.Proto = &proto
	}
	w, err := newWorldOn(t, rankDevices(testDevices(t), n), opts, bufBytes)
	require.NoError(t, err)
	return w
}

// newWorldOn creates a communicator over devs (rank r on devs[r]); the
// world is closed when t's test ends.
func newWorldOn(t *testing.T, devs []int, opts *ncclgo.Options, bufBytes uint64) (*world, error) {
	w := &world{t: t, size: bufBytes}
	t.Cleanup(w.close)
	for _, d := range devs {
		dev, err := cuda.GetDevice(d)
		if err != nil {
			return nil, err
		}
		ctx, err := dev.PrimaryContext()
		if err != nil {
			return nil, err
		}
		w.ctxs = append(w.ctxs, ctx)
	}
	initCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// InitAll's own waits honour initCtx; the watchdog reports one that
	// does not (a CUDA call that blocks), with every goroutine's stack.
	wd := watch(fmt.Sprintf("InitAll over devices %v", devs), nil, "InitAll")
	var err error
	w.comms, err = ncclgo.InitAll(initCtx, devs, opts)
	wd.stop()
	if err != nil {
		return nil, fmt.Errorf("InitAll over devices %v: %w", devs, err)
	}
	for r := range devs {
		ctx := w.ctxs[r]
		s, err := ctx.NewStream(true)
		if err != nil {
			return nil, err
		}
		w.streams = append(w.streams, s)
		a, err := ctx.MemAlloc(bufBytes)
		if err != nil {
			return nil, err
		}
		w.send = append(w.send, a)
		b, err := ctx.MemAlloc(bufBytes)
		if err != nil {
			return nil, err
		}
		w.recv = append(w.recv, b)
	}
	return w, nil
}

// close destroys the world (aborting its communicators first when a group
// hung, so that Destroy does not wait for it).
func (w *world) close() {
	wd := watch(fmt.Sprintf("closing a world of %d ranks", len(w.comms)), w.comms, "Abort and Destroy")
	defer wd.stop()
	if w.hung {
		for _, c := range w.comms {
			c.Abort()
		}
	}
	for _, c := range w.comms {
		if err := c.Destroy(); err != nil && !w.hung {
			w.t.Errorf("Destroy: %v", err)
		}
	}
	w.comms = nil
	for i := range w.streams {
		w.streams[i].Destroy()
	}
	for i := range w.send {
		w.ctxs[i].MemFree(w.send[i])
	}
	for i := range w.recv {
		w.ctxs[i].MemFree(w.recv[i])
	}
	for _, ctx := range w.ctxs {
		ctx.Release()
	}
	w.streams, w.send, w.recv, w.ctxs = nil, nil, nil, nil
}

// eachRank runs fn for every rank at once and waits for all of them.
func (w *world) eachRank(fn func(r int)) {
	var wg sync.WaitGroup
	for r := range w.comms {
		wg.Go(func() { fn(r) })
	}
	wg.Wait()
}

// op is a reduction as the suite exercises it.
type op struct {
	name   string
	red    ncclgo.RedOp
	scalar float64 // PreMulSum's scalar; 0 when not a PreMulSum
}

var ops = []op{
	{"sum", ncclgo.Sum, 0}, {"prod", ncclgo.Prod, 0}, {"max", ncclgo.Max, 0},
	{"min", ncclgo.Min, 0}, {"avg", ncclgo.Avg, 0}, {"premulsum", ncclgo.Sum, 2},
}

// offsetFor is the misalignment the suite applies: 2 bytes where the type
// allows it, else one element.
func offsetFor(t kspace.Type) uint64 { return uint64(max(2, t.Size())) }

// huge is the largest count the suite runs: AllReduce f32 sum and
// AllGather u8 only, out-of-place (TestHugeCollectives).
const huge = 64 << 20

func counts(coll kspace.Coll, t kspace.Type, o op) []int {
	c := []int{0, 1, 7, 1023}
	if o.name == "sum" || o.name == "max" {
		// 8197: DIRECT AllReduce's barrier one-shot for 2-byte types and
		// up (shares of 4-8 KiB); 1023 runs its LL one-shot.
		c = append(c, 8197, 1<<20+3)
	}
	return c
}

func built(coll kspace.Coll, o op, t kspace.Type, algo kspace.Algo, proto kspace.Proto) bool {
	f := kspace.Func{Coll: coll, RedOp: kspace.Unset, Type: kspace.Unset, Algo: algo, Proto: proto}
	if coll.HasRedOp() {
		f.RedOp, f.Type = kspace.Sum, t
		switch o.name {
		case "prod":
			f.RedOp = kspace.Prod
		case "max", "min":
			f.RedOp = kspace.MinMax
		case "premulsum":
			f.RedOp = kspace.PreMulSum
		case "avg":
			f.RedOp = kspace.PreMulSum
			if t.IsInteger() {
				f.RedOp = kspace.SumPostDiv
			}
		}
	}
	return kernels.Available(f)
}

var (
	seedOnce sync.Once
	runSeed  uint64
	seedErr  error
)

// suiteSeed is this run's data seed, printed once per test that uses it.
func suiteSeed(t *testing.T) uint64 {
	t.Helper()
	seedOnce.Do(func() {
		var fixed bool
		runSeed, fixed, seedErr = pattern.Seed()
		if seedErr == nil && !fixed {
			fmt.Printf("data seed %d (replay with %s=%d)\n", runSeed, pattern.EnvSeed, runSeed)
		}
	})
	require.NoError(t, seedErr)
	t.Logf("data seed %d (replay with %s=%d)", runSeed, pattern.EnvSeed, runSeed)
	return runSeed
}

// callSeq numbers the calls of the run, so that every call's data differs
// from the previous one's.
var callSeq atomic.Uint64

func nextCallSeed(seed uint64) uint64 { return pattern.Mix(seed, callSeq.Add(1)) }

// TestCollectives runs, for every rank count (NCCLGO_TEST_RANKS) and every
// configuration derived from the kernel-space model (configs), the full
// case list of each collective the configuration forces its algorithm for;
// a configuration that cannot run in one process (configApplies) is
// skipped with the reason.
func TestCollectives(t *testing.T) {
	gpu(t)
	seed := suiteSeed(t)
	for _, n := range rankCounts(t) {
		for _, cfg := range configs {
			t.Run(fmt.Sprintf("ranks=%d/%s", n, cfg.name()), func(t *testing.T) {
				skipUnlessApplies(t, cfg, n)
				runConfig(t, n, cfg, seed)
			})
		}
	}
}

// runConfig runs, on a fresh world of n ranks under cfg, the full case
// list of every collective cfg runs: every type (the byte-moving
// collectives: three sizes of element), every op the function exists for
// (built), the counts of counts(), in place and out of place, every other
// call misaligned.
func runConfig(t *testing.T, n int, cfg config1, seed uint64) {
	// The arena holds a call's input and output with their guards:
	// AllGather's output and ReduceScatter's input hold n chunks.
	bufBytes := 2*(uint64(1<<20+3)*8*uint64(n)) + 4096
	w := newWorld(t, n, cfg.algoEnv(), cfg.protoEnv(), bufBytes)
	algo, proto := cfg.algo, cfg.proto
	checks := 0
	for _, coll := range cfg.colls {
		for ty := kspace.I8; ty < kspace.NumTypes; ty++ {
			opList := ops
			if !coll.HasRedOp() {
				opList = ops[:1]
				if ty != kspace.U8 && ty != kspace.F32 && ty != kspace.F16 {
					continue // byte-moving collectives do not depend on the type
				}
			}
			for _, o := range opList {
				if !built(coll, o, ty, algo, proto) {
					continue
				}
				if pop, _ := patternOp(o); coll.HasRedOp() && !pattern.Checkable(ty, pop, n) {
					continue // fp8 Avg over many ranks: no useful bound (pattern.Checkable)
				}
				for _, count := range counts(coll, ty, o) {
					for _, inPlace := range []bool{false, true} {
						c := call{kind: kindColl, coll: coll, ty: ty, o: o, count: count, inPlace: inPlace,
							root: n / 2, mis: checks%2 == 0, seed: nextCallSeed(seed)}
						runCalls(t, w, []call{c}, false)
						checks++
					}
				}
			}
		}
	}
	t.Logf("%d checks", checks)
	require.Positive(t, checks, "no function of this configuration is in the kernel set")
}

// runCalls runs one group of calls on w and fails the test on any wrong
// byte; a group that does not complete within NCCLGO_TEST_WAIT stops it,
// after printing where it is stuck.
func runCalls(t *testing.T, w *world, calls []call, perRank bool) {
	t.Helper()
	g, err := planGroup(calls, len(w.comms), calls[0].seed)
	require.NoError(t, err)
	errs := g.run(w, perRank)
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	if len(errs) > 0 {
		t.Logf("group:%s", describe(calls))
	}
	if w.hung {
		t.FailNow()
	}
}

// newPreMulSum makes comm's PreMulSum op with o's scalar in ty.
func (w *world) newPreMulSum(c *ncclgo.Comm, o op, ty kspace.Type) (ncclgo.RedOp, error) {
	var scalar any
	switch ncclgo.DataType(ty) {
	case ncclgo.Float64:
		scalar = o.scalar
	case ncclgo.Int8, ncclgo.Uint8, ncclgo.Int32, ncclgo.Uint32, ncclgo.Int64, ncclgo.Uint64:
		scalar = int64(o.scalar)
	default:
		scalar = float32(o.scalar)
	}
	return c.NewPreMulSum(scalar, ncclgo.DataType(ty))
}

// TestSendRecv shifts data around the ring with grouped Send/Recv, and
// runs AllToAll, Gather and Scatter, for several sizes.
func TestSendRecv(t *testing.T) {
	gpu(t)
	seed := suiteSeed(t)
	for _, n := range rankCounts(t) {
		if n < 2 {
			continue
		}
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n, "ring", "SIMPLE", 4*(1<<20+3)*uint64(n)+4096)
			for _, count := range []int{0, 1, 7, 1023, 1<<20 + 3} {
				for _, shift := range []int{1, n - 1} {
					runCalls(t, w, []call{{kind: kindSendRecv, ty: kspace.U8, count: count, shift: shift, mis: true, seed: nextCallSeed(seed)}}, false)
				}
				per := count / n
				for _, kind := range []int{kindAllToAll, kindGather, kindScatter} {
					runCalls(t, w, []call{{kind: kind, ty: kspace.U8, count: per, root: n - 1, seed: nextCallSeed(seed)}}, false)
				}
			}
		})
	}
}

// TestNoDeadlockManyRanks runs AllReduce, AllGather and ReduceScatter for 4
// and 8 ranks on one GPU at every power-of-two size from 8 B to 1 GiB, where
// NCCL 2.30 deadlocks from 1 MiB up. Each size must finish within
// NCCLGO_TEST_WAIT.
func TestNoDeadlockManyRanks(t *testing.T) {
	gpu(t)
	if testing.Short() {
		t.Skip("-short: skipping the 8 B to 1 GiB sweep")
	}
	for _, n := range []int{4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			const maxBytes = 1 << 30
			w := newWorld(t, n, "ring", "LL,LL128,SIMPLE", maxBytes)
			for _, coll := range []kspace.Coll{kspace.AllReduce, kspace.AllGather, kspace.ReduceScatter} {
				for size := 8; size <= maxBytes; size *= 2 {
					count := size / 4
					if coll != kspace.AllReduce {
						count /= n // size is the whole buffer, as nccl-tests counts it
					}
					g := ncclgo.NewGroup()
					for r, c := range w.comms {
						var err error
						switch coll {
						case kspace.AllReduce:
							err = g.AllReduce(c, w.send[r], w.recv[r], count, ncclgo.Float32, ncclgo.Sum, w.streams[r])
						case kspace.AllGather:
							err = g.AllGather(c, w.send[r], w.recv[r], count, ncclgo.Float32, w.streams[r])
						case kspace.ReduceScatter:
							err = g.ReduceScatter(c, w.send[r], w.recv[r], count, ncclgo.Float32, ncclgo.Sum, w.streams[r])
						default:
							t.Fatalf("no call for %s", coll)
						}
						require.NoError(t, err)
					}
					require.NoError(t, g.End())
					what := fmt.Sprintf("%s %d B on %d ranks", coll, size, n)
					errs, hang := waitAll(what, w.comms)
					if hang != nil {
						w.hung = true
						t.Fatal(hang)
					}
					for r, err := range errs {
						require.NoError(t, err, "%s: rank %d", what, r)
					}
				}
			}
		})
	}
}

func TestRankDevices(t *testing.T) {
	t.Setenv("NCCLGO_TEST_DEVICES", "")
	require.Equal(t, []int{0}, testDevices(t))
	require.Equal(t, []int{0, 0, 0}, rankDevices(testDevices(t), 3), "default: every rank on device 0")
	t.Setenv("NCCLGO_TEST_DEVICES", "0, 1,2,3")
	devs := testDevices(t)
	require.Equal(t, []int{0, 1, 2, 3}, rankDevices(devs, 4), "one rank per listed device")
	require.Equal(t, []int{0, 1, 2, 3, 0, 1, 2, 3}, rankDevices(devs, 8))
	require.Equal(t, []int{0, 1}, rankDevices(devs, 2))
}

// TestSendRecvSizeMismatch: a Send and a Recv of different sizes split into
// different numbers of parts (one per channel the size asks for), so parts
// of one side have no partner. Both ranks must end with the device error
// (NG_DEV_ERR_BAD_WORK: ErrDevice, not ErrAborted) instead of hanging, and
// nothing may land in the receive buffer (every part compares the whole
// messages' sizes before it copies), small against large both ways. Each
// case gets its own communicators: the error aborts them.
func TestSendRecvSizeMismatch(t *testing.T) {
	gpu(t)
	cases := []struct{ sent, room uint64 }{
		{1 << 20, 1 << 19}, // the sender has more parts
		{1 << 19, 1 << 20}, // the receiver has more parts
		{100, 64 << 20},    // one part against every channel of the peer
		{64 << 20, 100},
		{1, 2}, // one part each
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("send=%d/recv=%d", tc.sent, tc.room), func(t *testing.T) {
			big := max(tc.sent, tc.room)
			w := newWorld(t, 2, "ring", "SIMPLE", big+64)
			poison := pattern.Bytes(pattern.Mix(suiteSeed(t), 0x5e), 1, 0, int(big))
			require.NoError(t, w.ctxs[0].MemcpyHtoD(w.send[0], unsafe.Pointer(&pattern.Bytes(1, 0, 0, int(tc.sent))[0]), tc.sent))
			require.NoError(t, w.ctxs[1].MemcpyHtoD(w.recv[1], unsafe.Pointer(&poison[0]), big))
			for _, ctx := range w.ctxs {
				require.NoError(t, ctx.Synchronize())
			}
			g := ncclgo.NewGroup()
			require.NoError(t, g.Send(w.comms[0], w.send[0], int(tc.sent), ncclgo.Uint8, 1, w.streams[0]))
			require.NoError(t, g.Recv(w.comms[1], w.recv[1], int(tc.room), ncclgo.Uint8, 0, w.streams[1]))
			require.NoError(t, g.End())
			errs, hang := waitAll(fmt.Sprintf("Send %d bytes to a Recv of %d", tc.sent, tc.room), w.comms)
			if hang != nil {
				w.hung = true
				t.Fatal(hang)
			}
			for r, err := range errs {
				require.ErrorIs(t, err, ncclgo.ErrDevice, "rank %d reports the mismatch", r)
				require.NotErrorIs(t, err, ncclgo.ErrAborted, "rank %d: the mismatch, not the abort it caused, is the error", r)
				t.Logf("rank %d: %v", r, err)
			}
			got := make([]byte, big)
			require.NoError(t, w.ctxs[1].MemcpyDtoH(unsafe.Pointer(&got[0]), w.recv[1], big))
			for i := range got {
				if got[i] != poison[i] {
					t.Fatalf("byte %d of the receive buffer was written (%#x): a mismatched part copied", i, got[i])
				}
			}
		})
	}
}

// hugePeriod is the period, in elements, of the huge cases' inputs: the
// host generates one period per rank and the device copies it along.
const hugePeriod = 1 << 20

// TestHugeCollectives runs AllReduce f32 sum and AllGather u8 of huge
// elements per rank (NCCLGO_TEST_LARGE=0 skips them). Their inputs are
// patterns periodic over hugePeriod elements (so unique per rank, and no
// shift of fewer than hugePeriod elements hides); the check reads windows
// at both ends, around every block boundary and at random places, plus the
// guard bytes past the end.
func TestHugeCollectives(t *testing.T) {
	gpu(t)
	if os.Getenv("NCCLGO_TEST_LARGE") == "0" {
		t.Skip("NCCLGO_TEST_LARGE=0")
	}
	seed := suiteSeed(t)
	for _, n := range rankCounts(t) {
		for _, cfg := range configs {
			t.Run(fmt.Sprintf("ranks=%d/%s", n, cfg.name()), func(t *testing.T) {
				skipUnlessApplies(t, cfg, n)
				algo, proto := cfg.algo, cfg.proto
				w := newWorld(t, n, cfg.algoEnv(), cfg.protoEnv(), uint64(huge)*uint64(max(4, n))+2*pattern.Guard)
				if cfg.runs(kspace.AllReduce) && built(kspace.AllReduce, ops[0], kspace.F32, algo, proto) {
					runHuge(t, w, kspace.AllReduce, kspace.F32, nextCallSeed(seed))
				}
				if cfg.runs(kspace.AllGather) && built(kspace.AllGather, ops[0], kspace.U8, algo, proto) {
					runHuge(t, w, kspace.AllGather, kspace.U8, nextCallSeed(seed))
				}
			})
		}
	}
}

func runHuge(t *testing.T, w *world, coll kspace.Coll, ty kspace.Type, seed uint64) {
	n, es := len(w.comms), ty.Size()
	in := func(r int, off uint64, k int) []byte {
		if coll == kspace.AllReduce {
			return pattern.Encoded(seed, ty, pattern.Sum, n, r, off, k)
		}
		return pattern.Bytes(seed, r, off, k)
	}
	outBytes := huge * es
	if coll == kspace.AllGather {
		outBytes *= n
	}
	guard := pattern.Bytes(pattern.Mix(seed, 0x9a), 0, 0, pattern.Guard)
	for r := range n {
		one := in(r, 0, hugePeriod)
		require.NoError(t, w.ctxs[r].MemcpyHtoD(w.send[r], unsafe.Pointer(&one[0]), uint64(len(one))))
		for have := len(one); have < huge*es; have *= 2 {
			require.NoError(t, w.ctxs[r].MemcpyDtoD(w.send[r]+cuda.DevicePtr(have), w.send[r], uint64(min(have, huge*es-have))))
		}
		require.NoError(t, w.ctxs[r].MemcpyHtoD(w.recv[r]+cuda.DevicePtr(outBytes), unsafe.Pointer(&guard[0]), pattern.Guard))
		require.NoError(t, w.ctxs[r].Synchronize())
	}
	g := ncclgo.NewGroup()
	for r, c := range w.comms {
		if coll == kspace.AllReduce {
			require.NoError(t, g.AllReduce(c, w.send[r], w.recv[r], huge, ncclgo.DataType(ty), ncclgo.Sum, w.streams[r]))
		} else {
			require.NoError(t, g.AllGather(c, w.send[r], w.recv[r], huge, ncclgo.DataType(ty), w.streams[r]))
		}
	}
	require.NoError(t, g.End())
	// Twice the usual bound: a huge call on 8 ranks of one GPU takes a while.
	errs, hang := waitAllWithin(fmt.Sprintf("%s %s count=%d", coll, ty, huge), w.comms, 2*testWait())
	if hang != nil {
		w.hung = true
		t.Fatal(hang)
	}
	for r, err := range errs {
		require.NoError(t, err, "%s %s count=%d: rank %d", coll, ty, huge, r)
	}
	// want returns output bytes [off, off+k) (k within one block).
	want := func(off, k int) []byte {
		if coll == kspace.AllReduce {
			return pattern.Results(seed, ty, pattern.Sum, n, 1, uint64(off/es%hugePeriod), k/es)
		}
		b := off / (huge * es)
		return in(b, uint64(off%(huge*es)%hugePeriod), k)
	}
	const win = 1 << 16
	starts := []int{0, outBytes - win}
	for b := 1; b < outBytes/(huge*es); b++ {
		starts = append(starts, b*huge*es-win, b*huge*es)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 16 {
		starts = append(starts, rng.IntN(outBytes/win)*win)
	}
	w.eachRank(func(r int) {
		for _, s := range starts {
			// Windows never straddle a period or a block: both are
			// multiples of win.
			got := make([]byte, win)
			if err := w.ctxs[r].MemcpyDtoH(unsafe.Pointer(&got[0]), w.recv[r]+cuda.DevicePtr(s), win); err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			if err := pattern.CompareBare(fmt.Sprintf("%s %s rank %d bytes [%d, %d)", coll, ty, r, s, s+win), got, want(s, win), es); err != nil {
				t.Error(err)
			}
		}
		got := make([]byte, pattern.Guard)
		if err := w.ctxs[r].MemcpyDtoH(unsafe.Pointer(&got[0]), w.recv[r]+cuda.DevicePtr(outBytes), pattern.Guard); err != nil {
			t.Errorf("rank %d: %v", r, err)
		} else if !bytes.Equal(got, guard) {
			t.Errorf("%s %s rank %d: the %d bytes past the output changed", coll, ty, r, pattern.Guard)
		}
	})
}
