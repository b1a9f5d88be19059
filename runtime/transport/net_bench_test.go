package transport

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
	"github.com/ncclgo/ncclgo/runtime/proxy"
)

// BenchmarkNETStepLL measures NET's one-hop latency for one LL line (8 B
// of payload): two fake hosts over loopback play ping-pong on a ring's
// two connections, rank 0's stand-in kernel writing a line, rank 1's
// seeing it and writing one back. An op is the round trip; ns/hop is
// half of it. Both fake hosts share the process's proxy engine (one
// thread). Sub-benchmarks: "2kernels", a goroutine per stand-in kernel
// (spinning with Gosched: on a 2-core box three spinners share two cores,
// so this mostly measures the scheduler), and "1kernel", one goroutine
// playing both kernels in turn (one spinner beside the proxy's thread:
// with `taskset -c 0,1`, the closest this box gets to the GPU's case of
// kernels that hold no CPU).
func BenchmarkNETStepLL(b *testing.B) {
	for _, one := range []bool{false, true} {
		name := "2kernels"
		if one {
			name = "1kernel"
		}
		b.Run(name, func(b *testing.B) { benchStepLL(b, one) })
	}
}

// spinHot waits for cond like spin, but yields only every 256 looks (and
// reads the clock every 4096): the stand-in kernel of a 1kernel run
// spins as a GPU thread would.
func spinHot(t testing.TB, what string, cond func() bool) bool {
	var d time.Time
	for i := 1; !cond(); i++ {
		if i%256 == 0 {
			runtime.Gosched()
		}
		if i%4096 == 0 {
			if d.IsZero() {
				d = time.Now().Add(20 * time.Second)
			} else if time.Now().After(d) {
				t.Errorf("%s: waited 20 s", what)
				return false
			}
		}
	}
	return true
}

func benchStepLL(b *testing.B, oneKernel bool) {
	sets, mems := connectNET(b, loNet(b, 1, 1), 2, 1, func(r int, err error) { b.Errorf("rank %d: proxy error: %v", r, err) })
	defer func() {
		for _, s := range sets {
			require.NoError(b, s.Close())
		}
	}()
	wait := spin
	if oneKernel {
		wait = spinHot
	}
	var stop atomic.Bool
	// hop waits for line s on in, credits it, then writes line s on out
	// (first is rank 0's first half: write, then wait).
	type side struct {
		m       *hostMem
		out, in generated.ConnInfo
	}
	rank := func(r int) side {
		return side{mems[r], sets[r].Send[Key{0, 1 - r}], sets[r].Recv[Key{0, 1 - r}]}
	}
	line := func(m *hostMem, ci generated.ConnInfo, s uint64) []byte {
		slot := uint64(ci.BuffSizes[0]) / generated.Steps
		return m.at(ci.Buffs[0]+(s%generated.Steps)*slot, 16)
	}
	write := func(sd side, s uint64) bool {
		head := sd.m.word(sd.out.Head)
		if !wait(b, "send head", func() bool { return stop.Load() || atomic.LoadUint64(head)+generated.Steps > s }) {
			return false
		}
		buf, f := line(sd.m, sd.out, s), uint64(llFlag(s))
		postLLSize(sd.m, sd.out, s, 1)
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[8])), f<<32|uint64(s>>32))
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[0])), f<<32|uint64(uint32(s)))
		return true
	}
	read := func(sd side, s uint64) bool {
		buf := line(sd.m, sd.in, s)
		if !wait(b, "recv line", func() bool { return stop.Load() || llReady(buf, llFlag(s)) }) {
			return false
		}
		atomic.StoreUint64(sd.m.word(sd.in.Head), s+1)
		return true
	}
	r0, r1 := rank(0), rank(1)
	var wg sync.WaitGroup
	if !oneKernel {
		wg.Go(func() {
			for s := uint64(0); s < uint64(b.N) && !stop.Load(); s++ {
				if !read(r1, s) || !write(r1, s) {
					return
				}
			}
		})
	}
	sys0 := socketCalls(sets)
	b.ResetTimer()
	t0 := time.Now()
	for s := uint64(0); s < uint64(b.N); s++ {
		if !write(r0, s) {
			break
		}
		if oneKernel && (!read(r1, s) || !write(r1, s)) {
			break
		}
		if !read(r0, s) {
			break
		}
	}
	b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(2*b.N), "ns/hop")
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	sys := socketCalls(sets)
	hops := float64(2 * b.N)
	b.ReportMetric(float64(sys.Writes-sys0.Writes)/hops, "writes/hop")
	b.ReportMetric(float64(sys.Reads-sys0.Reads)/hops, "reads/hop")
	b.ReportMetric(float64(sys.EmptyReads-sys0.EmptyReads)/hops, "empty/hop")
}

// socketCalls sums the socket comms' system call counts over the NET
// connections of sets (data and credits, both sides): unlike the times,
// a figure that this box's noise does not move.
func socketCalls(sets []*Set) ncclnet.SocketStats {
	var sum ncclnet.SocketStats
	for _, set := range sets {
		for _, r := range set.regions {
			nr, ok := r.(*netRegion)
			if !ok {
				continue
			}
			for _, c := range []any{nr.pc.send, nr.pc.recv} {
				if st, ok := c.(interface{ Stats() ncclnet.SocketStats }); ok {
					v := st.Stats()
					sum.Writes += v.Writes
					sum.Reads += v.Reads
					sum.EmptyReads += v.EmptyReads
				}
			}
		}
	}
	return sum
}

// benchSimpleSizes gives SIMPLE NCCL's default 4 MiB buffer: 512 KiB
// slots.
var benchSimpleSizes = Sizes{netSizes[0], netSizes[1], 4 << 20}

// BenchmarkNETSimpleBandwidth streams full SIMPLE slots one way, rank 0's
// stand-in kernel to rank 1's, over loopback; an op is one slot. The
// kernels only move tail and head, so this is the transport's cost.
// Sub-benchmarks: the socket backend's threads × sockets per thread
// (4x1 is its loopback default), and with 4 MiB socket buffers
// (NCCLGO_SOCKET_BUFSIZE) instead of the kernel's autotuning; the sender
// splices or writes as NCCLGO_SOCKET_SPLICE says, and the environment's
// other settings apply (NCCLGO_SOCKET_CHUNK, NCCLGO_NET_*).
func BenchmarkNETSimpleBandwidth(b *testing.B) {
	for _, c := range []struct{ threads, socks, buf int }{{1, 1, 0}, {4, 1, 0}, {2, 2, 0}, {4, 1, 4 << 20}} {
		name := fmt.Sprintf("%dx%d", c.threads, c.socks)
		if c.buf > 0 {
			name += fmt.Sprintf("_buf%dM", c.buf>>20)
		}
		b.Run(name, func(b *testing.B) {
			o, err := ncclnet.SocketOptionsFromEnv(os.Getenv)
			require.NoError(b, err)
			o.Interface, o.Family, o.NThreads, o.NSocksPerThread, o.BufSize = "lo", "AF_INET", c.threads, c.socks, c.buf
			nt, err := ncclnet.NewSocket(o)
			require.NoError(b, err)
			benchSimpleBandwidth(b, nt)
		})
	}
}

func benchSimpleBandwidth(b *testing.B, nt ncclnet.Net) {
	sets, mems := connectNETSizes(b, nt, 2, 1, benchSimpleSizes, func(r int, err error) { b.Errorf("rank %d: proxy error: %v", r, err) })
	defer func() {
		for _, s := range sets {
			require.NoError(b, s.Close())
		}
	}()
	send, recv := sets[0].Send[Key{0, 1}], sets[1].Recv[Key{0, 0}]
	b.SetBytes(int64(benchSimpleSizes[2] / generated.Steps))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		head, tail := mems[1].word(recv.Head), mems[1].word(recv.Tail)
		for s := uint64(0); s < uint64(b.N); s++ {
			if !spin(b, "recv tail", func() bool { return stop.Load() || atomic.LoadUint64(tail) > s }) || stop.Load() {
				return
			}
			atomic.StoreUint64(head, s+1)
		}
	})
	b.ResetTimer()
	head, tail := mems[0].word(send.Head), mems[0].word(send.Tail)
	for s := uint64(0); s < uint64(b.N); s++ {
		if !spin(b, "send head", func() bool { return atomic.LoadUint64(head)+generated.Steps > s }) {
			stop.Store(true)
			break
		}
		postSize(mems[0], send, s, int(benchSimpleSizes[2]/generated.Steps))
		atomic.StoreUint64(tail, s+1)
	}
	wg.Wait()
	b.StopTimer()
}

// BenchmarkNETIdlePass is one pass of a sending and a receiving proxy
// connection with nothing to do, over 1 and 32 channels (one NET
// connection each, multiplexed on one comm): the LL scan of every
// connection's open steps, and the receiver's read of its data socket.
// A step that becomes ready waits on average half a pass (of the whole
// engine) to be seen.
func BenchmarkNETIdlePass(b *testing.B) {
	for _, nch := range []int{1, 32} {
		b.Run(fmt.Sprintf("ch%d", nch), func(b *testing.B) {
			sets, _ := connectNET(b, loNet(b, 1, 1), 2, nch, func(r int, err error) { b.Errorf("rank %d: proxy error: %v", r, err) })
			defer func() {
				for _, s := range sets {
					require.NoError(b, s.Close())
				}
			}()
			var send, recv *netConn
			for _, r := range sets[0].regions {
				if nr, ok := r.(*netRegion); ok && nr.pc.sender {
					send = nr.pc
				} else if ok {
					recv = nr.pc
				}
			}
			// Out of the engine: this goroutine runs their passes.
			e := proxy.Acquire()
			defer e.Release()
			for _, c := range []*netConn{send, recv} {
				require.NoError(b, c.leave(e)) // so that Close waits for no drain
			}
			b.Run("send", func(b *testing.B) {
				for range b.N {
					if _, err := send.Progress(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("recv", func(b *testing.B) {
				for range b.N {
					if _, err := recv.Progress(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
