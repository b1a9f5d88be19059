package ncclgo

import (
	"context"
	"errors"
	"fmt"
	"github.com/ncclgo/ncclgo/internal/leakcheck"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/tune"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"testing"
	"time"
)

func TestInitAllWithoutDriver(t *testing.T) {
	if cuda.Init() == nil {
		t.Skip("a CUDA driver is present: this test covers machines without one")
	}
	_, err := InitAll(context.Background(), []int{0, 0}, nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
	_, err = InitRank(context.Background(), 2, UniqueID{}, 0, 0, nil)
	assert.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
}

func TestInitArgs(t *testing.T) {
	_, err := InitAll(context.Background(), nil, nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = InitRank(context.Background(), 0, UniqueID{}, 0, 0, nil)
	var ae *ArgError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "nRanks", ae.Arg)
	_, err = InitRank(context.Background(), 4, UniqueID{}, 4, 0, nil)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "rank", ae.Arg)
	assert.Contains(t, err.Error(), "rank=4: want 0..3")
	_, err = InitRank(context.Background(), 4, UniqueID{}, 1, -1, nil)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "device", ae.Arg)
	_, err = InitAll(context.Background(), []int{0}, &Options{P2PChannelsPerPeer: -1})
	if cuda.Init() == nil {
		assert.ErrorIs(t, err, ErrInvalidArgument)
	}
}

// fakeComm is a communicator with no device, for validation and planning.
func fakeComm(t testing.TB, rank, n int) *Comm {
	t.Helper()
	return newComm(comm.NewHostOnly(nil, rank, n, 0, comm.Settings{}, hostTuner(t, n)))
}

// hostTuner is a tuner for n ranks on one H200-like GPU.
func hostTuner(t testing.TB, n int) *tune.Tuner {
	t.Helper()
	tn, err := tune.New(tune.Topology{NRanks: n, RanksPerGPU: n, SMCount: 132, BlocksPerSM: 1, IntraBW: 20, NChannels: 8}, config.Default(), nil)
	require.NoError(t, err)
	return tn
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

// TestInitRankScalableIDsBounded: InitRankScalable takes 1..min(32,
// nRanks) root ids, and names the argument otherwise.
func TestInitRankScalableIDsBounded(t *testing.T) {
	for _, c := range []struct{ nRanks, ids int }{{4, 0}, {4, 5}, {64, bootstrap.MaxRoots + 1}} {
		_, err := InitRankScalable(context.Background(), c.nRanks, make([]UniqueID, c.ids), 0, 0, nil)
		var ae *ArgError
		require.ErrorAs(t, err, &ae, "%d ids for %d ranks", c.ids, c.nRanks)
		assert.Equal(t, "len(ids)", ae.Arg)
		assert.Equal(t, "InitRankScalable", ae.Op)
		assert.Contains(t, err.Error(), fmt.Sprintf("1..%d unique ids", min(bootstrap.MaxRoots, c.nRanks)))
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
	addr := bootstrap.UniqueID(r.ID()).Addr()
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.Wait(context.Background()), bootstrap.ErrClosed)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "the listener is closed")
	leakcheck.WaitGoroutines(t, before)

	// The bootstrap timeout ends a root nobody checks in with.
	r, err = StartRoot(context.Background(), quiet)
	require.NoError(t, err)
	start := time.Now()
	err = r.Wait(context.Background())
	require.ErrorIs(t, err, bootstrap.ErrTimeout)
	t.Logf("root with no rank gave up after %v: %v", time.Since(start), err)
	leakcheck.WaitGoroutines(t, before)

	// GetUniqueID: the root ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	id, err := GetUniqueID(ctx)
	require.NoError(t, err)
	cancel()
	leakcheck.WaitGoroutines(t, before)
	_, err = net.Dial("tcp", bootstrap.UniqueID(id).Addr())
	require.Error(t, err)
	require.False(t, errors.Is(err, nil))
}

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
