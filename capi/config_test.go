package main

import (
	"reflect"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/gen"
)

// TestConfigFieldsDocumented: every field of NCCL's ncclConfig_t has an
// entry in configFields (what ncclgo does with it), and nothing else does.
func TestConfigFieldsDocumented(t *testing.T) {
	var want []string
	for _, f := range gen.NCCLConfigFields {
		switch f.Name {
		case "size", "magic", "version":
		default:
			want = append(want, f.Name)
		}
	}
	var got []string
	for _, f := range configFields {
		got = append(got, f.name)
		assert.NotEmpty(t, f.use, f.name)
		assert.LessOrEqual(t, f.since, gen.NCCLVersionCode, f.name)
	}
	assert.Equal(t, want, got)
}

// TestConfigRead: valid and invalid values of every field, as NCCL 2.28
// takes them, and the version and size rules by which NCCL reads an older
// config.
func TestConfigRead(t *testing.T) {
	read := func(mut func(c *cConfig)) (config, result) {
		c := defaultConfig()
		mut(&c)
		return readConfig("CommInitRankConfig", &c)
	}
	conf, r := read(func(*cConfig) {})
	require.EqualValues(t, cSuccess, r)
	assert.True(t, conf.blocking)
	assert.Nil(t, conf.opts.MinNChannels)
	assert.Nil(t, conf.opts.MaxNChannels)
	assert.True(t, conf.opts.UntrackedOneRankCopies, "one-rank copies as NCCL's: nothing waits for them")
	conf, r = readConfig("CommInitRank", nil)
	require.EqualValues(t, cSuccess, r)
	assert.True(t, conf.opts.UntrackedOneRankCopies)

	conf, r = read(func(c *cConfig) { c.blocking, c.minCTAs, c.maxCTAs = 0, 2, 200 })
	require.EqualValues(t, cSuccess, r, lastError())
	assert.False(t, conf.blocking)
	assert.Equal(t, 2, *conf.opts.MinNChannels)
	assert.Equal(t, 64, *conf.opts.MaxNChannels, "NCCL caps maxCTAs at 64")

	// Every value NCCL accepts is accepted.
	name := []byte("torch-pg\x00")
	var pin runtime.Pinner
	pin.Pin(&name[0])
	defer pin.Unpin()
	ok := []func(c *cConfig){
		func(c *cConfig) { c.cgaClusterSize = 0 }, func(c *cConfig) { c.cgaClusterSize = 8 },
		func(c *cConfig) { c.splitShare = 1 }, func(c *cConfig) { c.shrinkShare = 0 },
		func(c *cConfig) { c.collnetEnable = 1 }, func(c *cConfig) { c.CTAPolicy = 2 },
		func(c *cConfig) { c.nvlsCTAs = 16 }, func(c *cConfig) { c.nChannelsPerNetPeer = 64 },
		func(c *cConfig) { c.nvlinkCentricSched = 1 }, func(c *cConfig) { c.trafficClass = 5 },
		func(c *cConfig) { c.commName = (*_Ctype_char)(unsafe.Pointer(&name[0])) },
	}
	for i, mut := range ok {
		_, r := read(mut)
		assert.EqualValues(t, cSuccess, r, "case %d: %s", i, lastError())
	}
	// Every value NCCL refuses is refused, naming the field.
	for _, tc := range []struct {
		field string
		mut   func(c *cConfig)
	}{
		{"blocking", func(c *cConfig) { c.blocking = 2 }},
		{"minCTAs", func(c *cConfig) { c.minCTAs = 0 }},
		{"maxCTAs", func(c *cConfig) { c.maxCTAs = -3 }},
		{"minCTAs", func(c *cConfig) { c.minCTAs, c.maxCTAs = 8, 4 }},
		{"cgaClusterSize", func(c *cConfig) { c.cgaClusterSize = -1 }},
		{"splitShare", func(c *cConfig) { c.splitShare = 2 }},
		{"collnetEnable", func(c *cConfig) { c.collnetEnable = -1 }},
		{"CTAPolicy", func(c *cConfig) { c.CTAPolicy = 3 }},
		{"shrinkShare", func(c *cConfig) { c.shrinkShare = 7 }},
		{"nvlsCTAs", func(c *cConfig) { c.nvlsCTAs = 0 }},
		{"nChannelsPerNetPeer", func(c *cConfig) { c.nChannelsPerNetPeer = 65 }},
		{"nvlinkCentricSched", func(c *cConfig) { c.nvlinkCentricSched = 2 }},
		{"magic", func(c *cConfig) { c.magic = 0 }},
		{"size", func(c *cConfig) { c.size = 8 }},
	} {
		_, r := read(tc.mut)
		assert.EqualValues(t, cInvalidArgument, r, tc.field)
		assert.Contains(t, lastError(), "config."+tc.field, tc.field)
	}

	// A config of NCCL 2.26 has no CTAPolicy yet: NCCL reads it at its
	// default, whatever the memory holds; one of 2.27 is checked.
	_, r = read(func(c *cConfig) { c.version, c.CTAPolicy = 22603, 9 })
	assert.EqualValues(t, cSuccess, r, lastError())
	_, r = read(func(c *cConfig) { c.version, c.CTAPolicy = 22700, 9 })
	assert.EqualValues(t, cInvalidArgument, r)
	// A 2.14 config is 24 bytes: what lies past them is not read.
	_, r = read(func(c *cConfig) { c.size, c.version, c.minCTAs, c.blocking = 24, 21400, -5, 0 })
	assert.EqualValues(t, cSuccess, r, lastError())
	assert.Equal(t, uintptr(80), reflect.TypeOf(cConfig{}).Size())
}
