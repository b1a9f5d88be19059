// Package tests is ncclgo's GPU correctness suite: every built collective,
// reduction op, data type, algorithm and protocol, for several ranks sharing
// one GPU or spread over several, odd and unaligned sizes, in-place and out-of-place, checked
// against a host reference (exact for integers; for floats, the tolerance
// that the reduction order implies).
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
package tests

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/gen/kspace"
	"github.com/ncclgo/ncclgo/internal/numfmt"
	"github.com/ncclgo/ncclgo/runtime/config"
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

// world is one communicator of n ranks, placed on NCCLGO_TEST_DEVICES, with
// a stream and buffers per rank in its own device's context.
type world struct {
	t       *testing.T
	comms   []*ncclgo.Comm
	ctxs    []*cuda.Context // rank r's device's primary context
	streams []*cuda.Stream
	send    []cuda.DevicePtr
	recv    []cuda.DevicePtr
	size    uint64 // bytes of each buffer
}

func newWorld(t *testing.T, n int, algo, proto string, bufBytes uint64) *world {
	t.Helper()
	devs := rankDevices(testDevices(t), n)
	w := &world{t: t, size: bufBytes}
	t.Cleanup(w.close)
	for _, d := range devs {
		dev, err := cuda.GetDevice(d)
		require.NoError(t, err)
		ctx, err := dev.PrimaryContext()
		require.NoError(t, err)
		w.ctxs = append(w.ctxs, ctx)
	}
	opts := &ncclgo.Options{Overrides: config.Overrides{Algo: &algo, Proto: &proto}}
	initCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	w.comms, err = ncclgo.InitAll(initCtx, devs, opts)
	require.NoError(t, err)
	for r := range n {
		ctx := w.ctxs[r]
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		a, err := ctx.MemAlloc(bufBytes)
		require.NoError(t, err)
		b, err := ctx.MemAlloc(bufBytes)
		require.NoError(t, err)
		w.streams, w.send, w.recv = append(w.streams, s), append(w.send, a), append(w.recv, b)
	}
	return w
}

func (w *world) close() {
	for _, c := range w.comms {
		require.NoError(w.t, c.Destroy())
	}
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
}

func (w *world) sync() {
	w.t.Helper()
	for _, s := range w.streams {
		require.NoError(w.t, s.Synchronize())
	}
	for _, c := range w.comms {
		require.NoError(w.t, c.Err())
	}
}

// upload copies b to p, an address in rank r's buffers.
func (w *world) upload(r int, p cuda.DevicePtr, b []byte) {
	if len(b) > 0 {
		require.NoError(w.t, w.ctxs[r].MemcpyHtoD(p, unsafe.Pointer(&b[0]), uint64(len(b))))
	}
}

// download reads n bytes at p, an address in rank r's buffers, and stops
// the test if it cannot.
func (w *world) download(r int, p cuda.DevicePtr, n int) []byte {
	b := w.read(r, p, n)
	if b == nil {
		w.t.FailNow()
	}
	return b
}

// read is download for use off the test goroutine: a failed copy is
// reported with Errorf and yields nil, which no check accepts.
func (w *world) read(r int, p cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	if n > 0 {
		if err := w.ctxs[r].MemcpyDtoH(unsafe.Pointer(&b[0]), p, uint64(n)); err != nil {
			w.t.Errorf("rank %d: reading %d bytes at %#x: %v", r, n, p, err)
			return nil
		}
	}
	return b
}

// eachRank runs fn for every rank at once and waits for all of them.
func (w *world) eachRank(fn func(r int)) {
	var wg sync.WaitGroup
	for r := range w.comms {
		wg.Go(func() { fn(r) })
	}
	wg.Wait()
}

// settle waits for the uploads and the poisoning: they run on the legacy
// stream, which the ranks' non-blocking streams do not wait for, and a
// pageable upload may return before its data has reached the device.
func (w *world) settle() {
	w.t.Helper()
	for _, ctx := range w.ctxs {
		require.NoError(w.t, ctx.Synchronize())
	}
}

func (w *world) poison() {
	for i := range w.comms {
		require.NoError(w.t, w.ctxs[i].MemsetD8(w.send[i], 0xa5, w.size))
		require.NoError(w.t, w.ctxs[i].MemsetD8(w.recv[i], 0x5a, w.size))
	}
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

// input is element i of rank r: small values whose sums and products are
// exact in every type (fp8 gets 0/1 so sums stay representable).
func input(t kspace.Type, o op, r, i int) float64 {
	if o.name == "prod" {
		return float64(1 + (r+i)%2)
	}
	if t == kspace.F8E4M3 || t == kspace.F8E5M2 {
		return float64((r + i) % 2)
	}
	return float64((r*7+i)%3 + 1)
}

// reduce is the exact reduction of element i over n ranks.
func reduce(t kspace.Type, o op, n, i int) float64 {
	acc := 0.0
	for r := range n {
		v := input(t, o, r, i)
		if o.scalar != 0 {
			v *= o.scalar
		}
		switch {
		case r == 0:
			acc = v
		case o.name == "prod":
			acc *= v
		case o.name == "max":
			acc = math.Max(acc, v)
		case o.name == "min":
			acc = math.Min(acc, v)
		default:
			acc += v
		}
	}
	if o.name == "avg" {
		acc /= float64(n)
		if t.IsInteger() {
			acc = math.Floor(acc)
		}
	}
	return acc
}

// tolerance for a float reduction over n ranks with value of magnitude v.
func tolerance(t kspace.Type, o op, n int, v float64) float64 {
	if t.IsInteger() {
		return 0
	}
	return float64(n+1) * numfmt.Epsilon(t) * math.Max(1, math.Abs(v))
}

func fill(t kspace.Type, o op, r, count int) []byte {
	var row [period]float64
	for k := range row {
		row[k] = input(t, o, r, k)
	}
	return tile(t, row, 0, count)
}

// tile encodes count elements of type t, element i being
// tab[(phase+i)%period]: one period is encoded, then copied along.
func tile(t kspace.Type, tab [period]float64, phase, count int) []byte {
	var one [period]float64
	for k := range one {
		one[k] = tab[(phase+k)%period]
	}
	unit := numfmt.Encode(t, one[:])
	out := make([]byte, count*t.Size())
	for n := copy(out, unit); n < len(out); {
		n += copy(out[n:], out[:n]) // out[:n] holds whole periods
	}
	return out
}

// period is how often the inputs repeat along a buffer: input depends on
// i only through i%2 and i%3.
const period = 6

// table tabulates f over one period.
func table(f func(i int) float64) (tab [period]float64) {
	for k := range tab {
		tab[k] = f(k)
	}
	return tab
}

// check compares got with want(i) (before rounding to t) and reports the
// first few mismatches.
func check(tb testing.TB, what string, t kspace.Type, got []byte, want func(i int) float64, tol func(v float64) float64) {
	tb.Helper()
	vals := numfmt.Decode(t, got)
	bad := 0
	var first []string
	rounded := map[float64]float64{}
	for i, g := range vals {
		w0 := want(i)
		w, ok := rounded[w0]
		if !ok {
			w = numfmt.Round(t, w0)
			rounded[w0] = w
		}
		if math.Abs(g-w) > tol(w) || math.IsNaN(g) {
			bad++
			if len(first) < 4 {
				first = append(first, fmt.Sprintf("[%d]=%v want %v", i, g, w))
			}
		}
	}
	if bad > 0 {
		tb.Errorf("%s: %d of %d elements wrong: %s", what, bad, len(vals), strings.Join(first, ", "))
	}
}

// checkPeriodic checks got against want(i) = tab[(phase+i)%period]. When
// got is bit-for-bit the rounded expectation (the common case: the inputs
// make most reductions exact) it costs a comparison; otherwise check looks
// at every element with the tolerance.
func checkPeriodic(tb testing.TB, what string, t kspace.Type, got []byte, tab [period]float64, phase int, tol func(v float64) float64) {
	tb.Helper()
	if bytes.Equal(got, tile(t, tab, phase, len(got)/t.Size())) {
		return
	}
	check(tb, what, t, got, func(i int) float64 { return tab[(phase+i)%period] }, tol)
}

// offsetFor is the misalignment the suite applies: 2 bytes where the type
// allows it, else one element.
func offsetFor(t kspace.Type) uint64 { return uint64(max(2, t.Size())) }

type config1 struct{ algo, proto string }

var configs = []config1{
	{"ring", "LL"}, {"ring", "LL128"}, {"ring", "SIMPLE"},
	{"allreduce:tree", "LL"}, {"allreduce:tree", "LL128"}, {"allreduce:tree", "SIMPLE"},
}

// huge is the largest count the suite runs: AllReduce f32 sum and
// AllGather u8 only, out-of-place, to keep the host reference cheap.
const huge = 64 << 20

func counts(coll kspace.Coll, t kspace.Type, o op, large bool) []int {
	c := []int{0, 1, 7, 1023}
	if o.name == "sum" || o.name == "max" {
		c = append(c, 1<<20+3)
	}
	if large && o.name == "sum" && (coll == kspace.AllReduce && t == kspace.F32 || coll == kspace.AllGather && t == kspace.U8) {
		c = append(c, huge)
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

func TestCollectives(t *testing.T) {
	gpu(t)
	large := os.Getenv("NCCLGO_TEST_LARGE") != "0"
	for _, n := range rankCounts(t) {
		for _, cfg := range configs {
			t.Run(fmt.Sprintf("ranks=%d/%s/%s", n, cfg.algo, cfg.proto), func(t *testing.T) {
				runConfig(t, n, cfg, large)
			})
		}
	}
}

func runConfig(t *testing.T, n int, cfg config1, large bool) {
	proto, err := kspace.ParseProto(cfg.proto)
	require.NoError(t, err)
	tree := strings.Contains(cfg.algo, "tree")
	// AllGather's output and ReduceScatter's input hold n chunks; the huge
	// cases are f32 AllReduce (one chunk) and u8 AllGather (n bytes each).
	bufBytes := uint64(1<<20+3)*8*uint64(n) + 64
	if large {
		bufBytes = max(bufBytes, uint64(huge)*uint64(max(4, n))+64)
	}
	w := newWorld(t, n, cfg.algo, cfg.proto, bufBytes)
	colls := []kspace.Coll{kspace.AllReduce}
	if !tree {
		colls = append(colls, kspace.ReduceScatter, kspace.Reduce, kspace.AllGather, kspace.Broadcast)
	}
	algo := kspace.Ring
	if tree {
		algo = kspace.Tree
	}
	checks := 0
	for _, coll := range colls {
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
				for _, count := range counts(coll, ty, o, large) {
					if uint64(count*ty.Size()*n)+offsetFor(ty) > w.size {
						continue
					}
					for _, inPlace := range []bool{false, true} {
						if inPlace && count == huge {
							continue
						}
						runOne(t, w, coll, ty, o, count, inPlace)
						checks++
					}
				}
			}
		}
	}
	t.Logf("%d checks", checks)
	require.Positive(t, checks, "no function of this configuration is in the kernel set")
}

func (w *world) redOp(c *ncclgo.Comm, o op, ty kspace.Type) ncclgo.RedOp {
	if o.scalar == 0 {
		return o.red
	}
	var scalar any
	switch ncclgo.DataType(ty) {
	case ncclgo.Float64:
		scalar = o.scalar
	case ncclgo.Int8, ncclgo.Uint8, ncclgo.Int32, ncclgo.Uint32, ncclgo.Int64, ncclgo.Uint64:
		scalar = int64(o.scalar)
	default:
		scalar = float32(o.scalar)
	}
	r, err := c.NewPreMulSum(scalar, ncclgo.DataType(ty))
	require.NoError(w.t, err)
	return r
}

func runOne(t *testing.T, w *world, coll kspace.Coll, ty kspace.Type, o op, count int, inPlace bool) {
	n := len(w.comms)
	es := ty.Size()
	off := offsetFor(ty)
	root := n / 2
	what := fmt.Sprintf("%s %s %s count=%d inPlace=%v", coll, o.name, ty, count, inPlace)
	w.poison()
	send := make([]cuda.DevicePtr, n)
	recv := make([]cuda.DevicePtr, n)
	for r := range n {
		send[r], recv[r] = w.send[r]+cuda.DevicePtr(off), w.recv[r]+cuda.DevicePtr(off)
		switch {
		case !inPlace:
		case coll == kspace.AllGather:
			send[r] = recv[r] + cuda.DevicePtr(r*count*es)
		case coll == kspace.ReduceScatter:
			recv[r] = send[r] + cuda.DevicePtr(r*count*es)
		default:
			send[r] = recv[r]
		}
		in := count
		if coll == kspace.ReduceScatter {
			in = count * n
		}
		w.upload(r, send[r], fill(ty, o, r, in))
	}
	w.settle()
	g := ncclgo.NewGroup()
	var redOps []ncclgo.RedOp
	for r, c := range w.comms {
		dt := ncclgo.DataType(ty)
		red := w.redOp(c, o, ty)
		redOps = append(redOps, red)
		var err error
		switch coll {
		case kspace.AllReduce:
			err = g.AllReduce(c, send[r], recv[r], count, dt, red, w.streams[r])
		case kspace.ReduceScatter:
			err = g.ReduceScatter(c, send[r], recv[r], count, dt, red, w.streams[r])
		case kspace.Reduce:
			err = g.Reduce(c, send[r], recv[r], count, dt, red, root, w.streams[r])
		case kspace.AllGather:
			err = g.AllGather(c, send[r], recv[r], count, dt, w.streams[r])
		case kspace.Broadcast:
			err = g.Broadcast(c, send[r], recv[r], count, dt, root, w.streams[r])
		}
		require.NoError(t, err, what)
	}
	require.NoError(t, g.End(), what)
	w.sync()
	for r, c := range w.comms {
		if o.scalar != 0 {
			require.NoError(t, c.DestroyRedOp(redOps[r]))
		}
	}
	exact := func(float64) float64 { return 0 }
	tol := func(v float64) float64 { return tolerance(ty, o, n, v) }
	reduced := table(func(i int) float64 { return reduce(ty, o, n, i) })
	inputs := make([][period]float64, n)
	for r := range n {
		inputs[r] = table(func(k int) float64 { return input(ty, o, r, k) })
	}
	// The ranks' results are read back and checked in parallel.
	w.eachRank(func(r int) {
		label := fmt.Sprintf("%s rank %d/%d", what, r, n)
		switch coll {
		case kspace.AllReduce:
			checkPeriodic(t, label, ty, w.read(r, recv[r], count*es), reduced, 0, tol)
		case kspace.Reduce:
			if r == root {
				checkPeriodic(t, label, ty, w.read(r, recv[r], count*es), reduced, 0, tol)
			}
		case kspace.ReduceScatter:
			checkPeriodic(t, label, ty, w.read(r, recv[r], count*es), reduced, (r*count)%period, tol)
		case kspace.AllGather:
			got := w.read(r, recv[r], n*count*es)
			for src := range n {
				checkPeriodic(t, fmt.Sprintf("%s, block of rank %d", label, src), ty,
					got[src*count*es:(src+1)*count*es], inputs[src], 0, exact)
			}
		case kspace.Broadcast:
			checkPeriodic(t, label, ty, w.read(r, recv[r], count*es), inputs[root], 0, exact)
		}
	})
}

// TestSendRecv shifts data around the ring with grouped Send/Recv, and
// checks AllToAll, for several sizes.
func TestSendRecv(t *testing.T) {
	gpu(t)
	for _, n := range rankCounts(t) {
		if n < 2 {
			continue
		}
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n, "ring", "SIMPLE", (1<<20+3)*uint64(n)+64)
			for _, count := range []int{0, 1, 7, 1023, 1<<20 + 3} {
				w.poison()
				for r := range n {
					w.upload(r, w.send[r], fill(kspace.U8, ops[0], r, count))
				}
				w.settle()
				g := ncclgo.NewGroup()
				for r, c := range w.comms {
					require.NoError(t, g.Send(c, w.send[r], count, ncclgo.Uint8, (r+1)%n, w.streams[r]))
					require.NoError(t, g.Recv(c, w.recv[r]+2, count, ncclgo.Uint8, (r+n-1)%n, w.streams[r]))
				}
				require.NoError(t, g.End())
				w.sync()
				for r := range n {
					from := (r + n - 1) % n
					check(t, fmt.Sprintf("sendrecv count=%d rank %d", count, r), kspace.U8, w.download(r, w.recv[r]+2, count),
						func(i int) float64 { return input(kspace.U8, ops[0], from, i) }, func(float64) float64 { return 0 })
				}

				// AllToAll: block j of rank r goes to rank j, landing at block r.
				per := count / n
				for r := range n {
					w.upload(r, w.send[r], fill(kspace.U8, ops[0], r, per*n))
				}
				w.settle()
				g = ncclgo.NewGroup()
				for r, c := range w.comms {
					require.NoError(t, g.AllToAll(c, w.send[r], w.recv[r], per, ncclgo.Uint8, w.streams[r]))
				}
				require.NoError(t, g.End())
				w.sync()
				for r := range n {
					check(t, fmt.Sprintf("alltoall per=%d rank %d", per, r), kspace.U8, w.download(r, w.recv[r], per*n),
						func(i int) float64 { return input(kspace.U8, ops[0], i/max(per, 1), r*per+i%max(per, 1)) },
						func(float64) float64 { return 0 })
				}
			}
		})
	}
}

// TestNoDeadlockManyRanks runs AllReduce, AllGather and ReduceScatter for 4
// and 8 ranks on one GPU at every power-of-two size from 8 B to 1 GiB, where
// NCCL 2.30 deadlocks from 1 MiB up. Each size must finish within a minute.
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
						}
						require.NoError(t, err)
					}
					require.NoError(t, g.End())
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					for _, c := range w.comms {
						require.NoError(t, c.Wait(ctx), "%s %d B on %d ranks did not finish", coll, size, n)
					}
					cancel()
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

// TestSendRecvSizeMismatch: a Send larger than its Recv must neither write
// past the receive buffer nor hang; the sender's communicator reports a
// device error.
func TestSendRecvSizeMismatch(t *testing.T) {
	gpu(t)
	const sent, room = 1 << 20, 1 << 19
	w := newWorld(t, 2, "ring", "SIMPLE", sent+64)
	w.poison()
	w.upload(0, w.send[0], fill(kspace.U8, ops[0], 0, sent))
	w.settle()
	g := ncclgo.NewGroup()
	require.NoError(t, g.Send(w.comms[0], w.send[0], sent, ncclgo.Uint8, 1, w.streams[0]))
	require.NoError(t, g.Recv(w.comms[1], w.recv[1], room, ncclgo.Uint8, 0, w.streams[1]))
	require.NoError(t, g.End())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err0 := w.comms[0].Wait(ctx)
	require.NoError(t, w.comms[1].Wait(ctx), "the receiver completes")
	require.ErrorIs(t, err0, ncclgo.ErrDevice, "the sender reports the mismatch")
	t.Logf("sender: %v", err0)
	// What lands inside the receive buffer is unspecified (each channel
	// carries its own share of each side's count); nothing may land past it.
	got := w.download(1, w.recv[1], sent)
	for i := room; i < sent; i++ {
		if got[i] != 0x5a {
			t.Fatalf("byte %d past the receive buffer was written (%#x)", i, got[i])
		}
	}
}
