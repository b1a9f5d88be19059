package main

/*
#include <string.h>
#include "nccl.h"

// ngConfigCopy is NCCL's reading of a caller's ncclConfig_t: the defaults
// of NCCL_CONFIG_INITIALIZER, overwritten by the caller's first size bytes
// (at most this header's ncclConfig_t); size was checked by the caller.
static ncclConfig_t ngConfigCopy(const ncclConfig_t* cfg, size_t size) {
	ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
	if (size > sizeof c) {
		size = sizeof c;
	}
	memcpy(&c, cfg, size);
	return c;
}

static ncclConfig_t ngConfigDefault(void) {
	ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
	return c;
}
*/
import "C"

// cConfig is ncclConfig_t, for the tests.
type cConfig = C.ncclConfig_t

// defaultConfig is NCCL_CONFIG_INITIALIZER.
func defaultConfig() C.ncclConfig_t { return C.ngConfigDefault() }

// configFields says, for every field of ncclConfig_t after size, magic and
// version, which NCCL release added it (a config of an older version is
// read with the field at its default, as NCCL reads it) and what ncclgo
// does with it. One place: the package documentation points here, and a
// test checks that every field of gen.NCCLConfigFields has an entry.
var configFields = []struct {
	name  string
	since int // NCCL_VERSION code
	use   string
}{
	{"blocking", 21400, "implemented: 0 makes init, split, shrink and finalize nonblocking (ncclInProgress)"},
	{"cgaClusterSize", 21700, "checked (>= 0), no effect: ncclgo does not launch its kernels as thread-block clusters"},
	{"minCTAs", 21700, "implemented: the least channels (ncclgo.Options.MinNChannels); above 64 it is 64, as in NCCL"},
	{"maxCTAs", 21700, "implemented: the most channels (ncclgo.Options.MaxNChannels); above 64 it is 64, as in NCCL"},
	{"netName", 21700, "read, no effect: ncclgo's one network is its socket transport (NET), so there is no other to name"},
	{"splitShare", 21800, "checked (0 or 1), no effect: a split communicator never shares its parent's resources"},
	{"trafficClass", 22500, "no effect: the socket transport sets no traffic class"},
	{"commName", 21900, "read, no effect: ncclgo's logs and errors name ranks, not communicators"},
	{"collnetEnable", 22700, "checked (0 or 1): ncclgo has no CollNet, so 1 runs as NCCL does without a CollNet plugin"},
	{"CTAPolicy", 22700, "checked (NCCL_CTA_POLICY_DEFAULT, _EFFICIENCY or _ZERO), no effect: ncclgo's tuner picks the channels"},
	{"shrinkShare", 22700, "checked (0 or 1), no effect: a shrunk communicator never shares its parent's resources"},
	{"nvlsCTAs", 22700, "checked (> 0), no effect: ncclgo has no NVLS algorithms"},
	{"nChannelsPerNetPeer", 22800, "checked (1..64), no effect: NET uses a communicator's channels, not a per-peer count"},
	{"nvlinkCentricSched", 22800, "checked (0 or 1), no effect"},
}

// effectiveConfig is the config NCCL would read from cfg (whose magic and
// size are checked): the caller's first size bytes over the defaults, and
// the fields a config of an older version did not have at their defaults.
func effectiveConfig(cfg *C.ncclConfig_t) *C.ncclConfig_t {
	c := C.ngConfigCopy(cfg, C.size_t(cfg.size))
	d := C.ngConfigDefault()
	v := int(c.version)
	old := func(since int) bool { return v < since }
	if old(21400) {
		c.blocking = d.blocking
	}
	if old(21700) {
		c.cgaClusterSize, c.minCTAs, c.maxCTAs, c.netName = d.cgaClusterSize, d.minCTAs, d.maxCTAs, d.netName
	}
	if old(22500) {
		c.trafficClass = d.trafficClass
	}
	if old(22700) {
		c.collnetEnable, c.CTAPolicy, c.shrinkShare, c.nvlsCTAs = d.collnetEnable, d.CTAPolicy, d.shrinkShare, d.nvlsCTAs
	}
	if old(22800) {
		c.nChannelsPerNetPeer, c.nvlinkCentricSched = d.nChannelsPerNetPeer, d.nvlinkCentricSched
	}
	return &c
}

// checkHints checks the fields that have no effect in ncclgo against
// NCCL's valid values, so that a config NCCL refuses is refused here too.
func checkHints(op string, c *C.ncclConfig_t) result {
	undef := C.int(C.NCCL_CONFIG_UNDEF_INT)
	for _, f := range []struct {
		name string
		v    C.int
		ok   func(int) bool
		want string
	}{
		{"cgaClusterSize", c.cgaClusterSize, func(v int) bool { return v >= 0 }, ">= 0"},
		{"splitShare", c.splitShare, func(v int) bool { return v == 0 || v == 1 }, "0 or 1"},
		{"collnetEnable", c.collnetEnable, func(v int) bool { return v == 0 || v == 1 }, "0 or 1"},
		{"CTAPolicy", c.CTAPolicy, func(v int) bool { return v >= C.NCCL_CTA_POLICY_DEFAULT && v <= C.NCCL_CTA_POLICY_ZERO }, "NCCL_CTA_POLICY_DEFAULT (0), _EFFICIENCY (1) or _ZERO (2)"},
		{"shrinkShare", c.shrinkShare, func(v int) bool { return v == 0 || v == 1 }, "0 or 1"},
		{"nvlsCTAs", c.nvlsCTAs, func(v int) bool { return v > 0 }, "> 0"},
		{"nChannelsPerNetPeer", c.nChannelsPerNetPeer, func(v int) bool { return v > 0 && v <= 64 }, "1..64"},
		{"nvlinkCentricSched", c.nvlinkCentricSched, func(v int) bool { return v == 0 || v == 1 }, "0 or 1"},
	} {
		if f.v != undef && !f.ok(int(f.v)) {
			return argError(op, "config."+f.name, int(f.v), f.want+" or NCCL_CONFIG_UNDEF_INT")
		}
	}
	return C.ncclSuccess
}
