package ncclgo

import (
	"context"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/stretchr/testify/require"
)

// gpuOrSkip skips without a driver, a device or a kernel image.
func gpuOrSkip(t *testing.T) {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("GPU test skipped: no CUDA driver: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("GPU test skipped: no CUDA device (%v)", err)
	}
	if _, _, err := kernels.FindImage(""); err != nil {
		t.Skipf("GPU test skipped: no kernel image (build one with `make kernels` or set NCCLGO_FATBIN): %v", err)
	}
}

// rankEnv is one rank's stream and buffers.
type rankEnv struct {
	c      *Comm
	ctx    *cuda.Context
	s      *cuda.Stream
	allocs []cuda.DevicePtr
}

// newRankEnv wraps c with its device's primary context and a stream of
// its own; the caller releases them.
func newRankEnv(t *testing.T, c *Comm) *rankEnv {
	t.Helper()
	dev, err := cuda.GetDevice(c.Device())
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	s, err := ctx.NewStream(true)
	require.NoError(t, err)
	return &rankEnv{c: c, ctx: ctx, s: s}
}

func (e *rankEnv) alloc(t *testing.T, n int) cuda.DevicePtr {
	t.Helper()
	p, err := e.ctx.MemAlloc(uint64(max(n, 1)))
	require.NoError(t, err)
	require.NoError(t, e.ctx.MemsetD8(p, 0, uint64(max(n, 1))))
	e.allocs = append(e.allocs, p)
	return p
}

func (e *rankEnv) put(t *testing.T, p cuda.DevicePtr, v []float32) {
	t.Helper()
	if len(v) > 0 {
		require.NoError(t, e.ctx.MemcpyHtoD(p, unsafe.Pointer(&v[0]), uint64(4*len(v))))
	}
}

func (e *rankEnv) get(t *testing.T, p cuda.DevicePtr, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	if n > 0 {
		require.NoError(t, e.ctx.MemcpyDtoH(unsafe.Pointer(&v[0]), p, uint64(4*n)))
	}
	return v
}

func setup(t *testing.T, devs []int, opts *Options) []*rankEnv {
	t.Helper()
	start := time.Now()
	comms, err := InitAll(context.Background(), devs, opts)
	require.NoError(t, err)
	t.Logf("InitAll(%v): %v, %d channels", devs, time.Since(start).Round(time.Millisecond), comms[0].NChannels())
	envs := make([]*rankEnv, len(comms))
	for i, c := range comms {
		envs[i] = newRankEnv(t, c)
	}
	t.Cleanup(func() {
		for _, e := range envs {
			for _, p := range e.allocs {
				_ = e.ctx.MemFree(p)
			}
		}
		for _, e := range envs {
			require.NoError(t, e.c.Destroy())
			_ = e.s.Destroy()
			_ = e.ctx.Release()
		}
	})
	return envs
}

// waitAll waits for every rank; on a timeout it aborts them all.
func waitAll(t *testing.T, envs []*rankEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, e := range envs {
		if err := e.c.Wait(ctx); err != nil {
			for _, e := range envs {
				e.c.Abort()
			}
			t.Fatalf("rank %d: %v", e.c.Rank(), err)
		}
	}
}

func val(r, i int) float32 { return float32((r+1)*(i%13) + r) }

func checkEq(t *testing.T, what string, got, want []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad < 5 {
				t.Errorf("%s: element %d = %v, want %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d elements wrong", what, bad, len(want))
	}
}

func runAllReduce(t *testing.T, envs []*rankEnv, count int, grouped bool) {
	n := len(envs)
	send := make([]cuda.DevicePtr, n)
	recv := make([]cuda.DevicePtr, n)
	want := make([]float32, count)
	for r, e := range envs {
		send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
		v := make([]float32, count)
		for i := range v {
			v[i] = val(r, i)
			want[i] += v[i]
		}
		e.put(t, send[r], v)
	}
	if grouped {
		g := NewGroup()
		for r, e := range envs {
			require.NoError(t, g.AllReduce(e.c, send[r], recv[r], count, Float32, Sum, e.s))
		}
		require.NoError(t, g.End())
	} else {
		for r, e := range envs {
			require.NoError(t, e.c.AllReduce(send[r], recv[r], count, Float32, Sum, e.s))
		}
	}
	waitAll(t, envs)
	for r, e := range envs {
		checkEq(t, fmt.Sprintf("rank %d AllReduce(%d)", r, count), e.get(t, recv[r], count), want)
	}
}

func TestGPUAllReduce(t *testing.T) {
	gpuOrSkip(t)
	for _, devs := range [][]int{{0, 0}, {0, 0, 0, 0}} {
		t.Run(fmt.Sprintf("%dranks", len(devs)), func(t *testing.T) {
			envs := setup(t, devs, nil)
			for _, count := range []int{1, 7, 1000, 1 << 18, 1<<18 + 3} {
				runAllReduce(t, envs, count, true)
			}
			runAllReduce(t, envs, 12345, false)
		})
	}
}

// TestGPUSeveralGPUs runs InitAll over 2, 4 and 8 GPUs (as many as are
// visible) and 2 GPUs × 2 ranks, checking AllReduce with every algorithm
// and protocol, and that the channels follow NVLink's 32 per GPU.
func TestGPUSeveralGPUs(t *testing.T) {
	gpuOrSkip(t)
	n, err := cuda.DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skipf("needs 2 or more GPUs, %d visible", n)
	}
	layouts := [][]int{{0, 1}, {0, 0, 1, 1}}
	for _, g := range []int{4, 8} {
		if g <= n {
			devs := make([]int, g)
			for i := range devs {
				devs[i] = i
			}
			layouts = append(layouts, devs)
		}
	}
	for _, devs := range layouts {
		t.Run(fmt.Sprint(devs), func(t *testing.T) {
			a, b := cuda.Device(devs[0]), cuda.Device(devs[len(devs)-1])
			if ok, err := a.CanAccessPeer(b); err != nil || !ok {
				t.Skipf("device %d cannot access device %d (%v)", a, b, err)
			}
			for _, ap := range [][2]string{{"RING", "LL"}, {"RING", "LL128"}, {"RING", "SIMPLE"}, {"TREE", "LL"}, {"TREE", "SIMPLE"}} {
				t.Run(ap[0]+"/"+ap[1], func(t *testing.T) {
					envs := setup(t, devs, &Options{Overrides: config.Overrides{Algo: new(ap[0]), Proto: new(ap[1])}})
					require.Equal(t, DefaultNChannels, envs[0].c.NChannels())
					for r, e := range envs {
						require.Equal(t, devs[r], e.c.Device())
					}
					for _, count := range []int{1, 1000, 1<<20 + 3} {
						runAllReduce(t, envs, count, true)
					}
				})
			}
		})
	}
}

func TestGPUAllReduceAlgoProto(t *testing.T) {
	gpuOrSkip(t)
	for _, algo := range []string{"RING", "TREE"} {
		for _, proto := range []string{"LL", "LL128", "SIMPLE"} {
			t.Run(algo+"/"+proto, func(t *testing.T) {
				envs := setup(t, []int{0, 0, 0}, &Options{Overrides: config.Overrides{Algo: new(algo), Proto: new(proto)}})
				for _, count := range []int{5, 4096, 1 << 18} {
					runAllReduce(t, envs, count, true)
				}
			})
		}
	}
}

func TestGPUCollectives(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0, 0, 0}, nil)
	n := len(envs)
	for _, count := range []int{3, 1000, 100003} {
		t.Run(fmt.Sprintf("AllGather/%d", count), func(t *testing.T) {
			runSplitAllGather(t, envs, count)
		})
		t.Run(fmt.Sprintf("ReduceScatter/%d", count), func(t *testing.T) {
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			sum := make([]float32, n*count)
			g := NewGroup()
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*n*count), e.alloc(t, 4*count)
				v := make([]float32, n*count)
				for i := range v {
					v[i] = val(r, i)
					sum[i] += v[i]
				}
				e.put(t, send[r], v)
				require.NoError(t, g.ReduceScatter(e.c, send[r], recv[r], count, Float32, Sum, e.s))
			}
			require.NoError(t, g.End())
			waitAll(t, envs)
			for r, e := range envs {
				checkEq(t, fmt.Sprintf("rank %d", r), e.get(t, recv[r], count), sum[r*count:(r+1)*count])
			}
		})
		t.Run(fmt.Sprintf("Broadcast/%d", count), func(t *testing.T) {
			const root = 2
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			want := make([]float32, count)
			for i := range want {
				want[i] = val(root, i)
			}
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
				if r == root {
					e.put(t, send[r], want)
				}
			}
			for r, e := range envs {
				require.NoError(t, e.c.Broadcast(send[r], recv[r], count, Float32, root, e.s))
			}
			waitAll(t, envs)
			for r, e := range envs {
				checkEq(t, fmt.Sprintf("rank %d", r), e.get(t, recv[r], count), want)
			}
		})
		t.Run(fmt.Sprintf("Reduce/%d", count), func(t *testing.T) {
			const root = 1
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			want := make([]float32, count)
			g := NewGroup()
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
				v := make([]float32, count)
				for i := range v {
					v[i] = val(r, i)
					want[i] = max(want[i], v[i])
				}
				e.put(t, send[r], v)
				require.NoError(t, g.Reduce(e.c, send[r], recv[r], count, Float32, Max, root, e.s))
			}
			require.NoError(t, g.End())
			waitAll(t, envs)
			checkEq(t, "root", envs[root].get(t, recv[root], count), want)
		})
		t.Run(fmt.Sprintf("AllReduceAvg/%d", count), func(t *testing.T) {
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			want := make([]float32, count)
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
				v := make([]float32, count)
				for i := range v {
					v[i] = float32(4 * (r + i%5))
					want[i] += v[i] / 4
				}
				e.put(t, send[r], v)
			}
			for r, e := range envs {
				require.NoError(t, e.c.AllReduce(send[r], recv[r], count, Float32, Avg, e.s))
			}
			waitAll(t, envs)
			for r, e := range envs {
				got := e.get(t, recv[r], count)
				for i := range want {
					if math.Abs(float64(got[i]-want[i])) > 1e-3 {
						t.Fatalf("rank %d element %d = %v, want %v", r, i, got[i], want[i])
					}
				}
			}
		})
		t.Run(fmt.Sprintf("AllToAll/%d", count), func(t *testing.T) {
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			g := NewGroup()
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*n*count), e.alloc(t, 4*n*count)
				v := make([]float32, n*count)
				for i := range v {
					v[i] = float32(r*1000000 + i)
				}
				e.put(t, send[r], v)
				require.NoError(t, g.AllToAll(e.c, send[r], recv[r], count, Float32, e.s))
			}
			require.NoError(t, g.End())
			waitAll(t, envs)
			for r, e := range envs {
				want := make([]float32, n*count)
				for p := range n {
					for i := range count {
						want[p*count+i] = float32(p*1000000 + r*count + i)
					}
				}
				checkEq(t, fmt.Sprintf("rank %d", r), e.get(t, recv[r], n*count), want)
			}
		})
		t.Run(fmt.Sprintf("SendRecvRing/%d", count), func(t *testing.T) {
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
				v := make([]float32, count)
				for i := range v {
					v[i] = val(r, i)
				}
				e.put(t, send[r], v)
			}
			g := NewGroup()
			for r, e := range envs {
				require.NoError(t, g.Send(e.c, send[r], count, Float32, (r+1)%n, e.s))
				require.NoError(t, g.Recv(e.c, recv[r], count, Float32, (r+n-1)%n, e.s))
			}
			require.NoError(t, g.End())
			waitAll(t, envs)
			for r, e := range envs {
				p := (r + n - 1) % n
				want := make([]float32, count)
				for i := range want {
					want[i] = val(p, i)
				}
				checkEq(t, fmt.Sprintf("rank %d", r), e.get(t, recv[r], count), want)
			}
		})
	}
}

// Many aggregated collectives in one group use a work FIFO.
func TestGPUWorkFIFO(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0}, nil)
	const ops, count = 80, 1000
	send := make([][]cuda.DevicePtr, len(envs))
	g := NewGroup()
	for r, e := range envs {
		for k := range ops {
			p := e.alloc(t, 4*count)
			v := make([]float32, count)
			for i := range v {
				v[i] = float32(k + r + i%3)
			}
			e.put(t, p, v)
			send[r] = append(send[r], p)
			require.NoError(t, g.AllReduce(e.c, p, p, count, Float32, Sum, e.s))
		}
	}
	require.NoError(t, g.End())
	waitAll(t, envs)
	for r, e := range envs {
		for k := range ops {
			got := e.get(t, send[r][k], count)
			for i := range got {
				if w := float32(2*k + 1 + 2*(i%3)); got[i] != w {
					t.Fatalf("rank %d op %d element %d = %v, want %v", r, k, i, got[i], w)
				}
			}
		}
	}
}

func TestMain(m *testing.M) {
	os.Setenv("NCCL_NVLS_ENABLE", "0")
	os.Exit(m.Run())
}

// Eight ranks on one GPU, with sizes at which NCCL 2.30 deadlocks.
func TestGPUEightRanksOneGPU(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0, 0, 0, 0, 0, 0, 0}, nil)
	for _, count := range []int{2, 1 << 18, 1 << 20, 1<<22 + 5} {
		runAllReduce(t, envs, count, count%2 == 0)
	}
	n := len(envs)
	const count = 1 << 18 // 1 MiB per rank
	send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
	for r, e := range envs {
		send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*n*count)
		v := make([]float32, count)
		for i := range v {
			v[i] = val(r, i)
		}
		e.put(t, send[r], v)
	}
	start := time.Now()
	const iters = 20
	for range iters {
		for r, e := range envs {
			require.NoError(t, e.c.AllGather(send[r], recv[r], count, Float32, e.s))
		}
	}
	waitAll(t, envs)
	t.Logf("AllGather 8 ranks × 1 MiB: %v per call", time.Since(start)/iters)
	for r, e := range envs {
		got := e.get(t, recv[r], n*count)
		for p := range n {
			for i := 0; i < count; i += 997 {
				if got[p*count+i] != val(p, i) {
					t.Fatalf("rank %d block %d element %d = %v, want %v", r, p, i, got[p*count+i], val(p, i))
				}
			}
		}
	}
}

// Integer and custom reductions.
func TestGPUReductionOps(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0, 0}, nil)
	n := len(envs)
	const count = 5000
	type opCase struct {
		name string
		dt   DataType
		op   func(e *rankEnv) RedOp
		ref  func(vals []int32) float64
	}
	sumOf := func(v []int32) float64 {
		s := 0.0
		for _, x := range v {
			s += float64(x)
		}
		return s
	}
	cases := []opCase{
		{"SumInt32", Int32, func(*rankEnv) RedOp { return Sum }, sumOf},
		{"MinInt32", Int32, func(*rankEnv) RedOp { return Min }, func(v []int32) float64 {
			m := v[0]
			for _, x := range v {
				m = min(m, x)
			}
			return float64(m)
		}},
		{"MaxInt8AsInt32", Int32, func(*rankEnv) RedOp { return Max }, func(v []int32) float64 {
			m := v[0]
			for _, x := range v {
				m = max(m, x)
			}
			return float64(m)
		}},
		{"ProdInt32", Int32, func(*rankEnv) RedOp { return Prod }, func(v []int32) float64 {
			p := int32(1)
			for _, x := range v {
				p *= x
			}
			return float64(p)
		}},
		{"AvgInt32", Int32, func(*rankEnv) RedOp { return Avg }, func(v []int32) float64 { return float64(int32(sumOf(v)) / int32(len(v))) }},
		{"PreMulSumF32", Float32, func(e *rankEnv) RedOp {
			op, err := e.c.NewPreMulSum(0.5, Float32)
			require.NoError(t, err)
			return op
		}, func(v []int32) float64 { return sumOf(v) * 0.5 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			send, recv := make([]cuda.DevicePtr, n), make([]cuda.DevicePtr, n)
			in := make([][]int32, n)
			g := NewGroup()
			for r, e := range envs {
				send[r], recv[r] = e.alloc(t, 4*count), e.alloc(t, 4*count)
				in[r] = make([]int32, count)
				buf := make([]float32, count)
				for i := range count {
					in[r][i] = int32((r*7+i)%11 - 3)
					if tc.dt == Float32 {
						buf[i] = float32(in[r][i])
					} else {
						buf[i] = math.Float32frombits(uint32(in[r][i]))
					}
				}
				e.put(t, send[r], buf)
				require.NoError(t, g.AllReduce(e.c, send[r], recv[r], count, tc.dt, tc.op(e), e.s))
			}
			require.NoError(t, g.End())
			waitAll(t, envs)
			for r, e := range envs {
				got := e.get(t, recv[r], count)
				for i := range count {
					vals := make([]int32, n)
					for p := range n {
						vals[p] = in[p][i]
					}
					want := tc.ref(vals)
					g := float64(got[i])
					if tc.dt == Int32 {
						g = float64(int32(math.Float32bits(got[i])))
					}
					if g != want {
						t.Fatalf("rank %d element %d = %v, want %v (inputs %v)", r, i, g, want, vals)
					}
				}
			}
		})
	}
}

// A receive that no rank matches blocks until Abort, called from another
// goroutine while Wait blocks: the kernel leaves through the abort flag
// within a second, later calls fail with ErrAborted, and the GPU stays
// usable (a new communicator on it runs an AllReduce).
func TestGPUAbort(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0}, nil)
	e := envs[0]
	buf := e.alloc(t, 4096)
	require.NoError(t, e.c.Recv(buf, 1024, Float32, 1, e.s))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := e.c.Wait(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the unmatched receive waits")
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		waited <- e.c.Wait(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // the waiter is blocked in Wait
	t0 := time.Now()
	e.c.Abort()
	err = <-waited
	left := time.Since(t0)
	require.ErrorIs(t, err, ErrAborted)
	t.Logf("Abort from another goroutine: Wait returned after %v: %v", left.Round(time.Microsecond), err)
	require.Less(t, left, time.Second, "the spinning kernel leaves through the abort flag within a second")
	require.ErrorIs(t, e.c.AllReduce(buf, buf, 1, Float32, Sum, e.s), ErrAborted)
	runAllReduce(t, setup(t, []int{0, 0}, nil), 4097, false)
}

// Ranks as goroutines joined through GetUniqueID and InitRank (TCP
// bootstrap), and no goroutine left after Destroy.
func TestGPUInitRank(t *testing.T) {
	gpuOrSkip(t)
	before := goruntime.NumGoroutine()
	ctx := context.Background()
	id, err := GetUniqueID(ctx)
	require.NoError(t, err)
	const n = 3
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { comms[r], errs[r] = InitRank(ctx, n, id, r, 0, nil) })
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	envs := make([]*rankEnv, n)
	for r, c := range comms {
		envs[r] = newRankEnv(t, c)
	}
	runAllReduce(t, envs, 100000, false)
	for _, e := range envs {
		for _, p := range e.allocs {
			_ = e.ctx.MemFree(p)
		}
		require.NoError(t, e.c.Destroy())
		_ = e.s.Destroy()
		_ = e.ctx.Release()
	}
	leakcheck.WaitGoroutines(t, before)
}

// A big AllReduce, timed.
func TestGPUAllReduceLarge(t *testing.T) {
	gpuOrSkip(t)
	envs := setup(t, []int{0, 0}, nil)
	const count = 64 << 20 // 256 MiB of f32
	send := make([]cuda.DevicePtr, len(envs))
	for r, e := range envs {
		send[r] = e.alloc(t, 4*count)
		require.NoError(t, e.ctx.MemsetD8(send[r], 0, 4*count))
	}
	run := func() {
		g := NewGroup()
		for r, e := range envs {
			require.NoError(t, g.AllReduce(e.c, send[r], send[r], count, Float32, Sum, e.s))
		}
		require.NoError(t, g.End())
		waitAll(t, envs)
	}
	small := make([]cuda.DevicePtr, len(envs))
	for r, e := range envs {
		small[r] = e.alloc(t, 8)
	}
	for k := range 110 {
		if k == 10 {
			waitAll(t, envs)
		}
		start := time.Now()
		for r, e := range envs {
			require.NoError(t, e.c.AllReduce(small[r], small[r], 2, Float32, Sum, e.s))
		}
		if k == 109 {
			waitAll(t, envs)
			t.Logf("AllReduce 2 ranks 8 B: last launch pair %v", time.Since(start))
		}
	}
	start := time.Now()
	for range 100 {
		for r, e := range envs {
			require.NoError(t, e.c.AllReduce(small[r], small[r], 2, Float32, Sum, e.s))
		}
	}
	waitAll(t, envs)
	t.Logf("AllReduce 2 ranks 8 B: %v per call (100 back to back)", time.Since(start)/100)
	run()
	start = time.Now()
	const iters = 5
	for range iters {
		run()
	}
	d := time.Since(start) / iters
	bytes := float64(4 * count)
	t.Logf("AllReduce 2 ranks 256 MiB: %v, algbw %.1f GB/s, busbw %.1f GB/s", d, bytes/d.Seconds()/1e9, bytes/d.Seconds()/1e9)
}
