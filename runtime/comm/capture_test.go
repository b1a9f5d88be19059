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
// with records beside the chain, each launch adds a record node through
// cuGraphAddEventRecordNode, the first after the stream's capture
// dependency alone and each later one after the record before it as well;
// with records in the chain (NCCLGO_CAPTURE_RECORD=chain), a CU_EVENT_RECORD_EXTERNAL
// record; eager launches record as before.
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
		_, err = e.run(&p, s)
		require.NoError(t, err)
		first, deps1 := d.Counts(), d.Peek("record_deps")
		_, err = e.run(&p, s)
		require.NoError(t, err)
		deps2 := d.Peek("record_deps")
		d.Set("capture_status", 0)
		d.Reset()
		_, err = e.run(&p, s)
		require.NoError(t, err)
		eager := d.Counts()
		t.Logf("beside=%v: captured %v; eager %v", beside, first, eager)

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
		assert.Equal(t, 2, deps2, "a later record of the capture follows the record before it too")
		r, ok := e.beside[s.Handle()]
		require.True(t, ok)
		assert.True(t, r.Beside())
	}

	// The general path's record (a plan that does not fit one sequence)
	// goes through Engine.record: beside the chain under capture, each
	// after the one before; eagerly a plain record.
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
	d.Set("capture_status", 0)
	assert.Equal(t, 2, c["cuGraphAddEventRecordNode"])
	assert.Zero(t, c["cuEventRecordWithFlags"])
	assert.Equal(t, [2]int{1, 2}, [2]int{deps1, deps2}, "the second record follows the first")
	d.Reset()
	require.NoError(t, e.record(enqueue.Capture(false), ev, s))
	assert.Equal(t, 1, d.Counts()["cuEventRecord"])
}
