package enqueue

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// fifoCopyPTX is a kernel taking the kernel arguments of a launch whose
// works do not fit in them (generated.KernelArgs up to the inline works):
// its block copies the work FIFO (WorkBuf, NWork works) to the address in
// Comm, 8 bytes a thread at a time. Written by hand; the arguments' size
// and offsets are filled in from generated.KernelArgs.
const fifoCopyPTX = `.version 7.0
.target sm_70
.address_size 64

.visible .entry fifocopy(.param .align 8 .b8 a[%d])
{
	.reg .pred %%p<2>;
	.reg .b32 %%r<4>;
	.reg .b64 %%rd<10>;
	ld.param.u64 %%rd1, [a+%d];
	ld.param.u64 %%rd2, [a+%d];
	ld.param.u32 %%r1, [a+%d];
	cvta.to.global.u64 %%rd1, %%rd1;
	cvta.to.global.u64 %%rd2, %%rd2;
	cvt.u64.u32 %%rd3, %%r1;
	mul.lo.u64 %%rd3, %%rd3, %d;
	mov.u32 %%r2, %%tid.x;
	cvt.u64.u32 %%rd4, %%r2;
	mov.u32 %%r3, %%ntid.x;
	cvt.u64.u32 %%rd5, %%r3;
LOOP:
	setp.ge.u64 %%p1, %%rd4, %%rd3;
	@%%p1 bra DONE;
	shl.b64 %%rd6, %%rd4, 3;
	add.s64 %%rd7, %%rd2, %%rd6;
	ld.global.u64 %%rd8, [%%rd7];
	add.s64 %%rd9, %%rd1, %%rd6;
	st.global.u64 [%%rd9], %%rd8;
	add.s64 %%rd4, %%rd4, %%rd5;
	bra LOOP;
DONE:
	ret;
}
`

// fifoCopyKernel loads fifoCopyPTX in c.
func fifoCopyKernel(t *testing.T, c *cuda.Context) *cuda.Function {
	var a generated.KernelArgs
	ptx := fmt.Sprintf(fifoCopyPTX, argsHeaderSize, unsafe.Offsetof(a.Comm), unsafe.Offsetof(a.WorkBuf),
		unsafe.Offsetof(a.NWork), unsafe.Sizeof(generated.DevWork{})/8)
	m, err := c.LoadModule([]byte(ptx))
	require.NoError(t, err)
	f, err := m.Function("fifocopy")
	require.NoError(t, err)
	return f
}

// TestGPUCapturedFIFOFreedWithGraph captures graphs of a launch whose
// works do not fit in the kernel arguments (each capture's works
// distinct), replays each while later captures are made and earlier graphs
// destroyed (a window of graphs alive at once), and checks every replay
// copied its own capture's works; once every graph is destroyed, a later
// captured launch takes their work FIFOs back (CapturedBytes back to
// that launch's alone; the chunks are reused, and freed by Close) — within a bound, as CUDA destroys the graphs' user
// objects asynchronously.
func TestGPUCapturedFIFOFreedWithGraph(t *testing.T) {
	if err := cuda.Init(); errors.Is(err, cuda.ErrNoDriver) {
		t.Skip(err)
	}
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	c, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Release()) }()
	fn := fifoCopyKernel(t, c)

	ln := Launch{NThreads: 256, ChannelMask: 1, Works: make([]generated.DevWork, generated.WorkInlineMax+1)}
	ln.ChanWorkStart[generated.MaxChannels] = uint16(len(ln.Works))
	require.False(t, ln.Inline())
	n := uint64(len(WorkBytes(ln.Works)))
	out, err := c.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.MemFree(out)) }()
	l := NewLauncher(c, uint64(out), func(kspace.Func) (*cuda.Function, error) { return fn, nil })
	closed := false
	defer func() {
		if !closed {
			assert.NoError(t, l.Close())
		}
	}()
	s, err := c.NewStream(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Destroy()) }()

	type live struct {
		g    *cuda.Graph
		e    *cuda.GraphExec
		want []byte
	}
	plan := func(i int) (*Plan, []byte) {
		p := &Plan{Launches: []Launch{ln}}
		p.Launches[0].Works = make([]generated.DevWork, len(ln.Works))
		for j := range p.Launches[0].Works {
			w := &p.Launches[0].Works[j]
			w.Sendbuff, w.Recvbuff, w.Count = uint64(i)<<32|uint64(j), ^uint64(i), uint64(i*1000+j)
		}
		return p, WorkBytes(p.Launches[0].Works)
	}
	capture := func(i int) live {
		p, want := plan(i)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, s.BeginCapture(cuda.CaptureModeGlobal))
		runErr := l.Run(p, s)
		g, err := s.EndCapture()
		require.NoError(t, runErr, "capture %d", i)
		require.NoError(t, err, "capture %d", i)
		e, err := g.Instantiate()
		require.NoError(t, err)
		return live{g, e, want}
	}
	got := make([]byte, n)
	replay := func(i int, v live) {
		require.NoError(t, c.MemsetD8(out, 0, n))
		require.NoError(t, v.e.Launch(s))
		require.NoError(t, s.Synchronize())
		require.NoError(t, c.MemcpyDtoH(unsafe.Pointer(&got[0]), out, n))
		require.Equal(t, v.want, got, "replay of graph %d", i)
	}
	destroy := func(v live) {
		require.NoError(t, v.e.Destroy())
		require.NoError(t, v.g.Destroy())
	}

	const graphs, window = 200, 4
	var alive []live
	peak := uint64(0)
	for i := range graphs {
		v := capture(i)
		alive = append(alive, v)
		for k, a := range alive {
			replay(i-len(alive)+1+k, a)
		}
		if len(alive) == window {
			destroy(alive[0])
			alive = alive[1:]
		}
		peak = max(peak, l.CapturedBytes())
	}
	for _, a := range alive {
		destroy(a)
	}
	require.NoError(t, c.Synchronize())
	t.Logf("%d graphs of %d-byte FIFOs, %d alive at once: CapturedBytes peaked at %d", graphs, n, window, peak)
	assert.Less(t, peak, uint64(graphs/2)*n, "FIFOs of destroyed graphs taken back while capturing")
	assert.Less(t, l.captured.alloc, uint64(graphs/4)*2*max(n, heldChunk), "chunks of destroyed graphs reused")

	// The graphs' user objects are destroyed asynchronously: a later
	// captured launch frees their FIFOs once CUDA has.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := capture(graphs)
		replay(graphs, v)
		destroy(v)
		if l.CapturedBytes() <= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, l.CapturedBytes(), n, "only the last capture's FIFO is left")
	closed = true
	require.NoError(t, l.Close())
	assert.Zero(t, l.CapturedBytes())
	// Every graph is gone: their holds are freed once CUDA destroyed the
	// last one's user object.
	for cuda.GraphHoldsAlive() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Zero(t, cuda.GraphHoldsAlive())
}
