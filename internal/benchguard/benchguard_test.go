package benchguard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	m, err := Parse("# comment\n\nA 100 0 50\n  B 2.5 3 7  \n")
	require.NoError(t, err)
	assert.Equal(t, map[string]Baseline{"A": {100, 0, 50}, "B": {2.5, 3, 7}}, m)
	for _, bad := range []string{"A 100 0", "A x 0 1", "A 0 0 1", "A 1 -1 1", "A 1 2 0", "A 1 2 3 4"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
	_, err = Parse(baselineText)
	require.NoError(t, err, "the committed baseline")
}

func TestMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: six one-second benchmarks")
	}
	var sink []byte
	r := Measure(func(b *testing.B) {
		for b.Loop() {
			sink = make([]byte, 64)
		}
	})
	_ = sink
	assert.EqualValues(t, 1, r.AllocsPerOp)
	assert.Greater(t, r.NsPerOp, 0.0)
	assert.Greater(t, r.CalNsPerOp, 0.0)
}
