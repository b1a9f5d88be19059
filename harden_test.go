package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// TestAbortErrDuringDestroy: Abort and Err used to read Comm.flags while
// Destroy freed it (on a GPU, a read of freed pinned memory). Run with
// -race: the flags here are Go memory standing in for the pinned page.
func TestAbortErrDuringDestroy(t *testing.T) {
	for range 20 {
		c := fakeComm(t, 0, 1)
		var page [16]uint32
		c.flags = unsafe.Pointer(&page[0])
		c.net = bootstrap.NewInProcess(1)[0]
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				for range 200 {
					c.Abort()
					_ = c.Err()
				}
			})
		}
		close(start)
		require.NoError(t, c.Destroy())
		wg.Wait()
		assert.Nil(t, c.flags)
		assert.ErrorIs(t, c.Err(), ErrAborted, "Err after Destroy still reports the abort")
	}
}

// TestNilReceivers: methods on a nil *Comm, *Group, *Root or *Pending used
// to panic where Destroy and Abort accepted nil.
func TestNilReceivers(t *testing.T) {
	var c *Comm
	var g *Group
	s := cuda.WrapStream(nil, 0x100)
	require.NotPanics(t, func() {
		assert.Equal(t, -1, c.Rank())
		assert.Equal(t, 0, c.Size())
		assert.Equal(t, -1, c.Device())
		assert.Equal(t, 0, c.NChannels())
		c.Abort()
		for name, err := range map[string]error{
			"Err":          c.Err(),
			"Wait":         c.Wait(context.Background()),
			"Destroy":      c.Destroy(),
			"AllReduce":    c.AllReduce(1, 2, 3, Float32, Sum, s),
			"Send":         c.Send(1, 3, Float32, 0, s),
			"DestroyRedOp": c.DestroyRedOp(NumRedOps),
			"Group.Start":  g.Start(),
			"Group.End":    g.End(),
			"Recv":         g.Recv(c, 1, 3, Float32, 0, s),
		} {
			require.ErrorIs(t, err, ErrInvalidArgument, name)
			var ae *ArgError
			require.ErrorAs(t, err, &ae, name)
			assert.Equal(t, "nil", ae.Value, name)
			assert.Contains(t, err.Error(), name+": ", "the error names the call")
		}
		_, err := c.NewPreMulSum(2.0, Float32)
		require.ErrorIs(t, err, ErrInvalidArgument)
		g.Discard()
		var r *Root
		var p *Pending[*Comm]
		assert.Equal(t, UniqueID{}, r.ID())
		select {
		case <-p.Done():
		default:
			t.Error("a nil Pending's Done is not closed: a select on it would wait forever")
		}
		p.Abort()
	})
	err := fakeComm(t, 0, 1).Group(nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestInitRankRanksBounded: 2^32+1 ranks used to wrap on the wire to a
// 1-rank communicator.
func TestInitRankRanksBounded(t *testing.T) {
	for _, n := range []int{0, bootstrap.MaxRanks + 1, 1<<32 + 1} {
		_, err := InitRank(context.Background(), n, UniqueID{}, 0, 0, nil)
		var ae *ArgError
		require.ErrorAs(t, err, &ae, n)
		assert.Equal(t, "nRanks", ae.Arg)
		assert.Contains(t, err.Error(), "want 1..1048576")
	}
}

// settle waits for the goroutine count to come back to before.
func settle(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestRootLifetime: GetUniqueID used to leave a root listener and
// goroutines running with no way to stop them. StartRoot gives a handle;
// GetUniqueID's root ends with its context (or the bootstrap timeout).
func TestRootLifetime(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:0")
	quiet := &Options{Logger: slog.New(slog.DiscardHandler), BootstrapTimeout: 300 * time.Millisecond}
	before := runtime.NumGoroutine()

	r, err := StartRoot(context.Background(), quiet)
	require.NoError(t, err)
	addr := r.ID().Addr()
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.Wait(context.Background()), bootstrap.ErrClosed)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "the listener is closed")
	settle(t, before)

	// The bootstrap timeout ends a root nobody checks in with.
	r, err = StartRoot(context.Background(), quiet)
	require.NoError(t, err)
	start := time.Now()
	err = r.Wait(context.Background())
	require.ErrorIs(t, err, bootstrap.ErrTimeout)
	t.Logf("root with no rank gave up after %v: %v", time.Since(start), err)
	settle(t, before)

	// GetUniqueID: the root ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	id, err := GetUniqueID(ctx)
	require.NoError(t, err)
	cancel()
	settle(t, before)
	_, err = net.Dial("tcp", id.Addr())
	require.Error(t, err)
	require.False(t, errors.Is(err, nil))
}

func unsafePointer(p *uint32) unsafe.Pointer { return unsafe.Pointer(p) }

// TestNilReceiversEveryMethod calls every exported method of *Comm,
// *Group, *Root and *Pending on a nil receiver, with zero arguments: none
// may panic, and every error it returns is an *ArgError naming the
// receiver. Comm.Context used to panic, Comm.Group ran fn with a nil
// communicator, and every method of a nil Root or Pending panicked.
func TestNilReceiversEveryMethod(t *testing.T) {
	errType := reflect.TypeFor[error]()
	for _, recv := range []any{(*Comm)(nil), (*Group)(nil), (*Root)(nil), (*Pending[*Comm])(nil), (*Pending[[]*Comm])(nil)} {
		v := reflect.ValueOf(recv)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().Method(i).Name
			t.Run(fmt.Sprintf("%T.%s", recv, name), func(t *testing.T) {
				args := make([]reflect.Value, m.Type().NumIn())
				for j := range args {
					args[j] = reflect.Zero(m.Type().In(j))
				}
				if name == "Group" {
					// A fn that uses nothing: the nil receiver alone must fail.
					args[0] = reflect.ValueOf(func(*Group) error { return nil })
				}
				var out []reflect.Value
				require.NotPanics(t, func() { out = m.Call(args) })
				for _, o := range out {
					if o.Type() != errType {
						continue
					}
					err, _ := o.Interface().(error)
					if name == "Discard" || name == "Abort" {
						continue
					}
					var ae *ArgError
					require.ErrorAs(t, err, &ae)
					assert.Equal(t, "nil", ae.Value)
					assert.Contains(t, []string{"comm", "group", "root", "pending"}, ae.Arg)
					if ae.Arg == "root" || ae.Arg == "pending" {
						assert.Contains(t, err.Error(), name+": ", "the error names the call")
					}
				}
			})
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestDebugFileClosed: the NCCL_DEBUG_FILE each resolution of the options
// opens used to stay open when no communicator took it: after a root
// stopped, and after a Split (with its own options) that failed before
// building the child.
func TestDebugFileClosed(t *testing.T) {
	t.Setenv("NCCL_COMM_ID", "127.0.0.1:0")
	t.Setenv("NCCL_DEBUG", "INFO")
	t.Setenv("NCCL_DEBUG_FILE", filepath.Join(t.TempDir(), "nccl.%p.log"))
	// No collection: the finalizer of an unreachable *os.File would close
	// a leaked descriptor and hide the leak.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fds := openFDs(t)
	before := runtime.NumGoroutine()
	settleFDs := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for openFDs(t) > fds && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		assert.LessOrEqual(t, openFDs(t), fds, what) // an earlier test's leftovers may close some meanwhile
	}

	r, err := StartRoot(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	settleFDs("StartRoot, Close")

	ctx, cancel := context.WithCancel(context.Background())
	_, err = GetUniqueID(ctx)
	require.NoError(t, err)
	cancel()
	settleFDs("GetUniqueID, its context ended")
	settle(t, before)

	fakeChildren(t)
	parents := fakeParents(t, 2, false)
	_, errs := onEveryRank(2, func(r int) (*Comm, error) {
		return parents[r].Split(context.Background(), []int{0, -5}[r], 0, &Options{})
	})
	require.ErrorIs(t, errs[0], ErrInvalidArgument)
	require.ErrorIs(t, errs[1], ErrInvalidArgument)
	settleFDs("Split with options, failed")
	destroyAll(t, parents...)
}

// TestContextDuringDestroy: Destroy cleared Comm.cctx (and kset) while
// Context, a call's stream check and the planner's kernel lookup could be
// reading them on other goroutines (run with -race; the context here is a
// stand-in whose release fails without a driver).
func TestContextDuringDestroy(t *testing.T) {
	c := fakeComm(t, 0, 1)
	cx := &cuda.Context{}
	c.cctx = cx
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		for range 1000 {
			if got := c.Context(); got != cx {
				t.Errorf("Context() = %p, want %p", got, cx)
				return
			}
		}
	})
	close(start)
	_ = c.Destroy() // the stand-in's release fails
	wg.Wait()
	assert.Same(t, cx, c.Context(), "the released context, still c's")
}
