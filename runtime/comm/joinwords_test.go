package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

func TestMultiJoinFromEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "events": false, "words": true} {
		got, err := multiJoinWordsFromEnv(func(string) (string, bool) { return v, v != "" })
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := multiJoinWordsFromEnv(func(string) (string, bool) { return "word", true })
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvMultiJoin)
	assert.Contains(t, err.Error(), `"word"`)
}

// With join words, a multi-rank launch of n ranks on busy streams joins
// each other stream with a write of its word, and the first stream waits
// for them all in one call (a batch from two words on); after the launch
// every other stream still waits for the set's event. Each stream's word
// counts its launches; a rank whose words are all taken joins a further
// stream through events.
func TestJoinWords(t *testing.T) {
	inFakeDriver(t, "TestJoinWords", joinWordsChild)
}

func joinWordsChild(t *testing.T, lib string) {
	d, ctx, fn := fakeKernel(t, lib)
	sctx := otherContext(t, ctx)
	d.Set("stream_busy", 1)
	defer d.Set("stream_busy", 0)
	for _, n := range []int{2, 3, 8} {
		es := countEngines(t, ctx, fn, n, n)
		for _, e := range es {
			e.launcher.LaunchGraphs = true
			require.NoError(t, e.setupJoinWords())
		}
		group := smallGroup(t, sctx, es, kspace.AllReduce)
		m := measure(t, d, group) // 1 + 64 groups
		t.Logf("%d ranks: %v", n, m)
		assert.Equal(t, n-1, m.calls["cuStreamWriteValue32_v2"], "%d ranks: a write per other stream: %v", n, m)
		if n > 2 {
			assert.Equal(t, 1, m.calls["cuStreamBatchMemOp_v2"], "%d ranks: the waits in one call: %v", n, m)
			assert.Zero(t, m.calls["cuStreamWaitValue32_v2"], "%d ranks: %v", n, m)
		} else {
			assert.Equal(t, 1, m.calls["cuStreamWaitValue32_v2"], "%d ranks: one wait: %v", n, m)
		}
		assert.Equal(t, 1, m.calls["cuEventRecord"], "%d ranks: the set's record only: %v", n, m)
		assert.Equal(t, n-1, m.calls["cuStreamWaitEvent"], "%d ranks: the waits after the launch only: %v", n, m)
		assert.Zero(t, m.calls["cuStreamQuery"], "%d ranks: %v", n, m)
		assert.Equal(t, 1, m.calls["cuGraphLaunch"], "%d ranks: %v", n, m)
		assert.Equal(t, 1, m.cgo, "%d ranks: one cgo call", n)
		for r, e := range es[1:] {
			assert.Len(t, e.words.slot, 1, "rank %d: one stream, one word", r+1)
			assert.Equal(t, uint32(65), e.words.seq[0], "rank %d: a write per group", r+1)
		}
	}
	// A captured group launches each rank alone; its numbers are spent
	// unwritten, and the next eager group's writes carry larger ones.
	{
		es := countEngines(t, ctx, fn, 2, 2)
		for _, e := range es {
			e.launcher.LaunchGraphs = true
			require.NoError(t, e.setupJoinWords())
		}
		group := smallGroup(t, sctx, es, kspace.AllReduce)
		d.Set("capture_status", 1)
		d.Reset()
		err := group()
		c := d.Counts()
		d.Set("capture_status", 0)
		require.NoError(t, err, "captured")
		assert.Zero(t, c["cuStreamWriteValue32_v2"]+c["cuStreamWaitValue32_v2"], "captured: no word touched: %v", c)
		d.Reset()
		require.NoError(t, group())
		c = d.Counts()
		assert.Equal(t, 1, c["cuStreamWriteValue32_v2"], "eager after the capture: %v", c)
		assert.Equal(t, uint32(2), es[1].words.seq[0], "the captured group's number spent")
	}
	// Words run out: the rank's next stream joins through events.
	es := countEngines(t, ctx, fn, 2, 2)
	for _, e := range es {
		require.NoError(t, e.setupJoinWords())
	}
	for i := range joinWordSlots {
		_, _, ok := es[1].nextJoinWord(uintptr(0x1000 + i))
		require.True(t, ok, "word %d", i)
	}
	group := smallGroup(t, sctx, es, kspace.AllReduce)
	m := measure(t, d, group)
	assert.Zero(t, m.calls["cuStreamWriteValue32_v2"], "no word left: %v", m)
	assert.Equal(t, 2, m.calls["cuEventRecord"], "the other stream's and the set's: %v", m)
	assert.Equal(t, 2, m.calls["cuStreamWaitEvent"], "the join and the wait after: %v", m)
}
