package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-coll", "all_gather", "-b", "8", "-e", "128M", "-f", "2", "-g", "4", "-d", "bf16", "-o", "max"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, collAllGather, c.coll)
	assert.Equal(t, int64(8), c.minBytes)
	assert.Equal(t, int64(128<<20), c.maxBytes)
	assert.Equal(t, bfloat16T, c.dt)
	assert.Equal(t, opMax, c.op)

	for args, want := range map[string][]string{
		`-coll "gather"`:        {"-coll", "gather"},
		`-d "float128"`:         {"-d", "float128"},
		`-o "xor"`:              {"-o", "xor"},
		`-b "8Q"`:               {"-b", "8Q"},
		"-r 4: want a root":     {"-g", "4", "-r", "4"},
		"-f 1: want a factor":   {"-f", "1"},
		"-e 8 is below -b 1024": {"-b", "1K", "-e", "8"},
		"lists 1 devices":       {"-g", "2", "-devices", "0"},
	} {
		_, err := parseFlags(want, &errb)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), args)
	}
}

func TestSizes(t *testing.T) {
	c := &config{coll: collAllGather, nRanks: 4, dt: float32T}
	assert.Equal(t, int64(256), c.countFor(4096))
	s, r := c.bufferBytes(4096)
	assert.Equal(t, int64(1024), s)
	assert.Equal(t, int64(4096), r)
	c.coll = collAllReduce
	assert.InDelta(t, 1.5, c.coll.busFactor(4), 1e-9)
}

func TestEncodeDecode(t *testing.T) {
	vals := []float64{0, 1, 2, 3, 6, 24, 0.5, 96}
	for tt := int8T; tt <= float8e5m2T; tt++ {
		got := decode(tt, encode(tt, vals))
		for i, v := range vals {
			if !tt.isFloat() && v != float64(int64(v)) {
				continue
			}
			assert.InDelta(t, v, got[i], 1e-9, "%s %v", tt, v)
		}
	}
}
