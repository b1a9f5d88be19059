package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

func TestCaptureRecordFromEnv(t *testing.T) {
	for _, c := range []struct {
		v      string
		set    bool
		beside bool
		bad    bool
	}{{"", false, true, false}, {"", true, true, false}, {"chain", true, false, false}, {"beside", true, true, false}, {"Beside", true, false, true}, {"1", true, false, true}} {
		beside, err := captureRecordFromEnv(func(k string) (string, bool) {
			require.Equal(t, EnvCaptureRecord, k)
			return c.v, c.set
		})
		if c.bad {
			require.Error(t, err, "%q", c.v)
			assert.Contains(t, err.Error(), EnvCaptureRecord)
			assert.Contains(t, err.Error(), c.v)
			continue
		}
		require.NoError(t, err, "%q", c.v)
		assert.Equal(t, c.beside, beside, "%q", c.v)
	}
}

// TestCaptureRecordBeside runs a rank's launch on a stream being captured
// with the fake driver (in a child process, as TestDriverCallsPerLaunch):
// with records beside the chain, the first launch adds a record node
// through cuGraphAddEventRecordNode after the stream's capture dependency
// alone, and each later one moves that node after its own launch
// (cuGraphRemoveDependencies, cuGraphAddDependencies) instead of adding
// one; after a captured wait for the event, or where the driver refuses
// to move edges, the next record is a new node after the one before it.
// With records in the chain (NCCLGO_CAPTURE_RECORD=chain), a
// CU_EVENT_RECORD_EXTERNAL record; eager launches record as before.
func TestCaptureRecordBeside(t *testing.T) {
	inFakeDriver(t, "TestCaptureRecordBeside", captureBesideChild)
}

func captureBesideChild(t *testing.T, lib string) {
	d, ctx, fn := fakeKernel(t, lib)
	tasks := []enqueue.Task{{Coll: kspace.AllReduce, Send: 0x1000_0000, Recv: 0x2000_0000, Bytes: 8, Type: kspace.F32, Op: kspace.Sum}}

	for _, beside := range []bool{false, true} {
		e := countEngines(t, ctx, fn, 1, 2)[0]
		e.s.CaptureRecordBeside = beside
		s, err := ctx.NewStream(true)
		require.NoError(t, err)
		p, err := e.Plan(tasks)
		require.NoError(t, err)

		d.Set("capture_status", 1)
		d.Reset()
		ev, err := e.run(&p, s)
		require.NoError(t, err)
		first, deps1 := d.Counts(), d.Peek("record_deps")
		d.Reset()
		_, err = e.run(&p, s)
		require.NoError(t, err)
		second, deps2 := d.Counts(), d.Peek("record_deps")
		d.Set("capture_status", 0)
		d.Reset()
		_, err = e.run(&p, s)
		require.NoError(t, err)
		eager := d.Counts()
		t.Logf("beside=%v: captured %v, then %v; eager %v", beside, first, second, eager)

		assert.Equal(t, 1, first["cuLaunchKernel"], "beside=%v", beside)
		assert.Equal(t, 1, eager["cuEventRecord"], "eager: a plain record, beside=%v", beside)
		assert.Zero(t, eager["cuGraphAddEventRecordNode"]+eager["cuStreamGetCaptureInfo_v2"], "eager: no graph calls, beside=%v", beside)
		if !beside {
			assert.Equal(t, 1, first["cuEventRecordWithFlags"], "the record in the chain")
			assert.Zero(t, first["cuGraphAddEventRecordNode"]+first["cuStreamGetCaptureInfo_v2"])
			assert.Empty(t, e.beside)
			continue
		}
		assert.Zero(t, first["cuEventRecordWithFlags"], "no record in the chain")
		assert.Equal(t, 1, first["cuStreamGetCaptureInfo_v2"])
		assert.Equal(t, 1, first["cuGraphAddEventRecordNode"])
		assert.Equal(t, 1, deps1, "the first record follows the stream's capture dependency (the kernel)")
		assert.Zero(t, second["cuGraphAddEventRecordNode"], "a later record of the capture adds no node")
		assert.Equal(t, 1, second["cuGraphRemoveDependencies"], "it moves the record")
		assert.Equal(t, 1, second["cuGraphAddDependencies"])
		assert.Equal(t, 1, deps2, "the moved record follows the latest launch alone")
		r, ok := e.beside[besideKey{s.Handle(), ev}]
		require.True(t, ok)
		assert.True(t, r.Beside())
	}

	// The general path's record (a plan that does not fit one sequence)
	// goes through Engine.record: beside the chain under capture, moved
	// by the next record; after a captured wait for the event, or where
	// the driver refuses to move edges, a new node after the one before;
	// eagerly a plain record.
	e := countEngines(t, ctx, fn, 1, 2)[0]
	e.s.CaptureRecordBeside = true
	s, err := ctx.NewStream(true)
	require.NoError(t, err)
	ev, err := ctx.NewEvent(true)
	require.NoError(t, err)
	d.Set("capture_status", 1)
	d.Reset()
	require.NoError(t, e.record(enqueue.Capture(true), ev, s))
	deps1 := d.Peek("record_deps")
	require.NoError(t, e.record(enqueue.Capture(true), ev, s))
	deps2, c := d.Peek("record_deps"), d.Counts()
	assert.Equal(t, 1, c["cuGraphAddEventRecordNode"], "the second record moves the first")
	assert.Equal(t, 1, c["cuGraphRemoveDependencies"])
	assert.Zero(t, c["cuEventRecordWithFlags"])
	assert.Equal(t, [2]int{1, 1}, [2]int{deps1, deps2})

	d.Reset()
	other, err := ctx.NewStream(true)
	require.NoError(t, err)
	require.NoError(t, captureWait(enqueue.Capture(true), other, ev))
	require.NoError(t, e.record(enqueue.Capture(true), ev, s))
	c = d.Counts()
	assert.Equal(t, 1, c["cuGraphAddEventRecordNode"], "after a captured wait for it, a record stays")
	assert.Zero(t, c["cuGraphRemoveDependencies"])
	assert.Equal(t, 2, d.Peek("record_deps"), "and the next one follows it")
	_, waited := capturedWaits.Load(ev)
	assert.False(t, waited, "the record took the wait's note")

	d.Reset()
	d.Set("edges_result", 1)
	require.NoError(t, e.record(enqueue.Capture(true), ev, s))
	d.Set("edges_result", 0)
	c = d.Counts()
	assert.Equal(t, 1, c["cuGraphRemoveDependencies"], "a move tried")
	assert.Equal(t, 1, c["cuGraphAddEventRecordNode"], "refused: a new record")
	assert.Equal(t, 2, d.Peek("record_deps"), "after the one before")
	d.Set("capture_status", 0)

	d.Reset()
	require.NoError(t, e.record(enqueue.Capture(false), ev, s))
	assert.Equal(t, 1, d.Counts()["cuEventRecord"])
}
