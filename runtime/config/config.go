// Package config reads ncclgo's settings from the NCCL_* environment, with
// NCCL's variable names, grammar and meaning, and lets a program override
// them from Go.
//
// Precedence, lowest first: defaults (Default), the environment (FromEnv,
// Load), then the program (Config.Apply with Overrides, whose non-nil
// fields win). Every value is checked: a bad one is an error that names the
// variable (or Go field), the value and what is valid, and wraps ErrInvalid.
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxChannels is the most channels a communicator uses (NCCL's MAXCHANNELS).
const MaxChannels = 64

// NCCL's buffer sizes (src/init.cc).
const (
	// DefaultBuffSize is NCCL_BUFFSIZE's default, the SIMPLE protocol's
	// buffer per connection: 4 MiB.
	DefaultBuffSize = 1 << 22
	// DefaultLLBuffSize is NCCL_LL_BUFFSIZE's default:
	// NCCL_LL_LINES_PER_THREAD (8) × NCCL_LL_MAX_NTHREADS (512) ×
	// NCCL_STEPS (8) × 16-byte lines = 512 KiB.
	DefaultLLBuffSize = 8 * 512 * 8 * 16
	// DefaultLL128BuffSize is NCCL_LL128_BUFFSIZE's default:
	// NCCL_LL128_ELEMS_PER_THREAD (120) × NCCL_LL128_MAX_NTHREADS (640) ×
	// NCCL_STEPS (8) × 8 bytes = 4,915,200 bytes.
	DefaultLL128BuffSize = 120 * 640 * 8 * 8
)

// DefaultNetBuffSize is NCCLGO_NET_BUFFSIZE's default, the SIMPLE
// protocol's buffer per connection in a communicator that spans hosts:
// 8 MiB (NCCL: NCCL_BUFFSIZE's 4 MiB everywhere). Twice the bytes per
// step halve the proxy's and the socket net's work per byte; on one H200
// with 2 fake hosts (session 15), AllReduce 4–256 MiB went from
// 4.2–8.4 to 5.6–9.5 GB/s busbw.
const DefaultNetBuffSize = 1 << 23

// Thread-count limits, NCCL's (src/include/device.h).
const (
	WarpSize           = 32
	MaxNThreads        = 512 // NCCL_SIMPLE_MAX_NTHREADS and NCCL_LL_MAX_NTHREADS
	MaxLL128NThreads   = 640 // NCCL_LL128_MAX_NTHREADS
	minNThreads        = 2 * WarpSize
	minLL128NThreads   = MaxLL128NThreads / 4
	buffSizeGranule    = 1024
	ll128Granule       = 2048 // the transport's LL128 FIFO unit (transport.Sizes.Validate)
	maxBuffSize        = 1 << 30
	defaultLaunchModeS = "PARALLEL"
)

// LaunchMode is NCCL_LAUNCH_MODE: how the kernels of one group call, for
// several ranks in one process, are launched.
type LaunchMode int

// The launch modes.
const (
	LaunchParallel LaunchMode = iota // PARALLEL (NCCL's default): each rank launches on its own
	LaunchGroup                      // GROUP: launches of a group are issued together
)

func (m LaunchMode) String() string {
	if m == LaunchGroup {
		return "GROUP"
	}
	return defaultLaunchModeS
}

// Config holds the settings the runtime reads from NCCL_* variables. Zero
// channel and thread counts mean "chosen by the runtime"; use Default, not
// the zero Config, as a starting point (it holds NCCL's buffer sizes and
// debug mask).
type Config struct {
	// Algo and Proto are NCCL_ALGO and NCCL_PROTO (see Selection).
	Algo  AlgoSelection
	Proto ProtoSelection

	// NChannels (NCCL_NCHANNELS) forces the number of channels of every
	// collective; 0 lets the tuner choose per call within
	// [MinNChannels, MaxNChannels] (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS;
	// 0: 1 and MaxChannels). The tuner may still lower any of them so that
	// ranks sharing a GPU stay resident together (see package tune).
	NChannels    int
	MinNChannels int
	MaxNChannels int

	// Buffer sizes per connection, in bytes, per protocol: NCCL_BUFFSIZE
	// (SIMPLE), NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE.
	BuffSize      int
	LLBuffSize    int
	LL128BuffSize int
	// NetBuffSize (NCCLGO_NET_BUFFSIZE) replaces BuffSize in a
	// communicator whose ranks span hosts (SimpleBuffSize). Setting
	// NCCL_BUFFSIZE (or Overrides.BuffSize) alone sets both.
	NetBuffSize int

	// NThreads (NCCL_NTHREADS) is the block size of SIMPLE and LL kernels,
	// a multiple of 32 in [64, 512]; LL128NThreads (NCCL_LL128_NTHREADS) is
	// LL128's, a multiple of 32 in [160, 640]. 0: NCCL's maximum.
	NThreads      int
	LL128NThreads int

	// P2PDisable (NCCL_P2P_DISABLE), SHMDisable (NCCL_SHM_DISABLE) and
	// IBDisable (NCCL_IB_DISABLE) turn transports off.
	P2PDisable bool
	SHMDisable bool
	IBDisable  bool

	// SocketIfname is NCCL_SOCKET_IFNAME, the interfaces the socket
	// transport and bootstrap may use; SocketFamily is NCCL_SOCKET_FAMILY
	// ("", "AF_INET" or "AF_INET6").
	SocketIfname IfnameFilter
	SocketFamily string

	// BootstrapTimeout is NCCL_BOOTSTRAP_TIMEOUT (seconds, fractions
	// allowed), the bound of every bootstrap wait; 0: the bootstrap's
	// default. See ParseBootstrapTimeout.
	BootstrapTimeout time.Duration

	// HostID is NCCL_HOSTID: overrides the host identity, so that ranks on
	// one machine can act as separate nodes. Empty: the real host.
	HostID string

	// NVLSEnable is NCCL_NVLS_ENABLE. ncclgo never uses NVLink multicast
	// unless it is set to 1; NCCL's 2 (auto-detect) is refused.
	NVLSEnable bool

	// LaunchMode is NCCL_LAUNCH_MODE.
	LaunchMode LaunchMode

	// Debug, DebugSubsys and DebugFile are NCCL_DEBUG, NCCL_DEBUG_SUBSYS
	// and NCCL_DEBUG_FILE (see NewLogger and OpenDebugFile).
	Debug       DebugLevel
	DebugSubsys Subsys
	DebugFile   string
}

// Default returns the settings of an empty environment: NCCL's buffer sizes
// and debug subsystems, everything else automatic or off.
func Default() Config {
	return Config{
		BuffSize:      DefaultBuffSize,
		NetBuffSize:   DefaultNetBuffSize,
		LLBuffSize:    DefaultLLBuffSize,
		LL128BuffSize: DefaultLL128BuffSize,
		DebugSubsys:   DefaultSubsys,
	}
}

// SimpleBuffSize is the SIMPLE protocol's buffer per connection of a
// communicator over nodes hosts: NetBuffSize across hosts, else BuffSize.
func (c Config) SimpleBuffSize(nodes int) int {
	if nodes > 1 && c.NetBuffSize > 0 {
		return c.NetBuffSize
	}
	return c.BuffSize
}

// ErrInvalid is wrapped by every error about a bad setting.
var ErrInvalid = errors.New("invalid setting")

// SettingError reports a bad value: Name is the environment variable (or
// "Overrides.Field"), Value the value as given, Want what is valid, and Err
// the underlying parse error, if any.
type SettingError struct {
	Name, Value, Want string
	Err               error
}

func (e *SettingError) Error() string {
	s := fmt.Sprintf("%s=%q", e.Name, e.Value)
	if e.Err == nil {
		return s + ": want " + e.Want
	}
	// Selection errors carry their own list of valid names.
	s += ": " + strings.TrimPrefix(e.Err.Error(), ErrSelection.Error()+": ")
	if e.Want != "" {
		s += "; want " + e.Want
	}
	return s
}

// Unwrap returns the parse error, if any.
func (e *SettingError) Unwrap() error { return e.Err }

// Is makes every SettingError match ErrInvalid.
func (e *SettingError) Is(target error) bool { return target == ErrInvalid }

// Load reads the settings from the process environment (see FromEnv).
func Load() (Config, error) { return FromEnv(os.LookupEnv) }

// FromEnv reads the settings through lookup (os.LookupEnv, or a map in
// tests), starting from Default. Unset and empty variables keep their
// defaults. All bad values are reported, joined (errors.Join).
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	var errs []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		if !ok || strings.TrimSpace(v) == "" {
			return "", false
		}
		return v, true
	}
	for _, s := range intSettings {
		if v, ok := get(s.env); ok {
			n, err := ParseInt(v)
			if err != nil || !s.ok(n) {
				errs = append(errs, &SettingError{Name: s.env, Value: v, Want: s.want})
				continue
			}
			*s.field(&c) = int(n)
		}
	}
	if _, buf := get("NCCL_BUFFSIZE"); buf {
		if _, net := get("NCCLGO_NET_BUFFSIZE"); !net {
			c.NetBuffSize = c.BuffSize // NCCL_BUFFSIZE alone holds everywhere
		}
	}
	for _, s := range boolSettings {
		if v, ok := get(s.env); ok {
			b, err := parseBool01(v)
			if err != nil {
				want := "0 or 1"
				if s.env == "NCCL_NVLS_ENABLE" {
					want = "0 or 1 (ncclgo never enables NVLS automatically, so NCCL's 2 is not accepted)"
				}
				errs = append(errs, &SettingError{Name: s.env, Value: v, Want: want})
				continue
			}
			*s.field(&c) = b
		}
	}
	if v, ok := get("NCCL_ALGO"); ok {
		sel, err := ParseAlgoSelection(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_ALGO", Value: v, Err: err})
		}
		c.Algo = sel
	}
	if v, ok := get("NCCL_PROTO"); ok {
		sel, err := ParseProtoSelection(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_PROTO", Value: v, Err: err})
		}
		c.Proto = sel
	}
	if v, ok := get("NCCL_DEBUG"); ok {
		l, err := ParseDebugLevel(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_DEBUG", Value: v, Want: "VERSION, WARN, INFO, ABORT or TRACE"})
		}
		c.Debug = l
	}
	if v, ok := lookup("NCCL_DEBUG_SUBSYS"); ok {
		m, err := ParseSubsys(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_DEBUG_SUBSYS", Value: v, Err: err, Want: subsysWant})
		} else {
			c.DebugSubsys = m
		}
	}
	if v, ok := get("NCCL_DEBUG_FILE"); ok {
		c.DebugFile = v
	}
	if v, ok := get("NCCL_SOCKET_IFNAME"); ok {
		c.SocketIfname = ParseIfnameFilter(v)
	}
	if v, ok := get("NCCL_SOCKET_FAMILY"); ok {
		f, err := ParseSocketFamily(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_SOCKET_FAMILY", Value: v, Want: "AF_INET or AF_INET6"})
		}
		c.SocketFamily = f
	}
	if v, ok := get("NCCL_BOOTSTRAP_TIMEOUT"); ok {
		d, err := ParseBootstrapTimeout(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.BootstrapTimeout = d
	}
	if v, ok := get("NCCL_HOSTID"); ok {
		if err := checkHostID("NCCL_HOSTID", v); err != nil {
			errs = append(errs, err)
		}
		c.HostID = v
	}
	if v, ok := get("NCCL_LAUNCH_MODE"); ok {
		m, err := parseLaunchMode(v)
		if err != nil {
			errs = append(errs, &SettingError{Name: "NCCL_LAUNCH_MODE", Value: v, Want: "PARALLEL or GROUP"})
		}
		c.LaunchMode = m
	}
	if len(errs) == 0 {
		if err := c.checkChannels("NCCL_"); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// MaxHostIDLen is the longest NCCL_HOSTID: NCCL copies it into a
// 1024-byte buffer (and silently cuts a longer one).
const MaxHostIDLen = 1023

// checkHostID refuses a host identity that NCCL would cut, or that holds
// control characters (it is printed in logs and compared between ranks).
func checkHostID(name, v string) error {
	want := fmt.Sprintf("at most %d bytes of printable text", MaxHostIDLen)
	if len(v) > MaxHostIDLen {
		return &SettingError{Name: name, Value: v[:32] + "...", Want: fmt.Sprintf("%s (got %d bytes)", want, len(v))}
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return &SettingError{Name: name, Value: v, Want: fmt.Sprintf("%s (got %U)", want, r)}
		}
	}
	return nil
}

// Bounds of NCCL_BOOTSTRAP_TIMEOUT.
const (
	MinBootstrapTimeout = time.Millisecond
	MaxBootstrapTimeout = 7 * 24 * time.Hour
)

// ParseBootstrapTimeout parses an NCCL_BOOTSTRAP_TIMEOUT value: a finite
// number of seconds in [MinBootstrapTimeout, MaxBootstrapTimeout]
// ("0.5", "120"). NaN, infinities, and values that would round to less
// than a millisecond are refused with a *SettingError naming the variable.
func ParseBootstrapTimeout(v string) (time.Duration, error) {
	secs, err := parseSeconds(v)
	// The comparisons are false for NaN, so NaN is refused too.
	if err != nil || !(secs >= MinBootstrapTimeout.Seconds() && secs <= MaxBootstrapTimeout.Seconds()) {
		return 0, &SettingError{Name: "NCCL_BOOTSTRAP_TIMEOUT", Value: v,
			Want: fmt.Sprintf("a number of seconds in %g..%g", MinBootstrapTimeout.Seconds(), MaxBootstrapTimeout.Seconds())}
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func parseBool01(v string) (bool, error) {
	switch strings.TrimSpace(v) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, ErrInvalid
}

// ParseSocketFamily parses NCCL_SOCKET_FAMILY: "AF_INET" or "AF_INET6"
// (any case, spaces trimmed), returned in upper case; the empty string is
// no preference. Anything else is ErrInvalid.
func ParseSocketFamily(v string) (string, error) {
	v = strings.ToUpper(strings.TrimSpace(v))
	if v == "" || v == "AF_INET" || v == "AF_INET6" {
		return v, nil
	}
	return "", ErrInvalid
}

func parseLaunchMode(v string) (LaunchMode, error) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "PARALLEL":
		return LaunchParallel, nil
	case "GROUP":
		return LaunchGroup, nil
	}
	return 0, ErrInvalid
}

// checkChannels checks that the channel bounds agree with each other.
func (c Config) checkChannels(prefix string) error {
	name := func(s string) string {
		if prefix == "NCCL_" {
			return map[string]string{"min": "NCCL_MIN_NCHANNELS", "max": "NCCL_MAX_NCHANNELS", "n": "NCCL_NCHANNELS"}[s]
		}
		return map[string]string{"min": "Overrides.MinNChannels", "max": "Overrides.MaxNChannels", "n": "Overrides.NChannels"}[s]
	}
	if c.MinNChannels > 0 && c.MaxNChannels > 0 && c.MinNChannels > c.MaxNChannels {
		return &SettingError{Name: name("min"), Value: strconv.Itoa(c.MinNChannels),
			Want: fmt.Sprintf("at most %s (%d)", name("max"), c.MaxNChannels)}
	}
	if c.NChannels > 0 && c.MaxNChannels > 0 && c.NChannels > c.MaxNChannels {
		return &SettingError{Name: name("n"), Value: strconv.Itoa(c.NChannels),
			Want: fmt.Sprintf("at most %s (%d)", name("max"), c.MaxNChannels)}
	}
	if c.NChannels > 0 && c.MinNChannels > c.NChannels {
		return &SettingError{Name: name("n"), Value: strconv.Itoa(c.NChannels),
			Want: fmt.Sprintf("at least %s (%d)", name("min"), c.MinNChannels)}
	}
	return nil
}

type intSetting struct {
	env, goName string
	field       func(*Config) *int
	ok          func(int64) bool
	want        string
}

func inRange(lo, hi int64) func(int64) bool { return func(n int64) bool { return n >= lo && n <= hi } }

func multipleIn(m, lo, hi int64) func(int64) bool {
	return func(n int64) bool { return n >= lo && n <= hi && n%m == 0 }
}

var channelsWant = fmt.Sprintf("an integer in [1, %d]", MaxChannels)
var buffWant = fmt.Sprintf("a byte count in [%d, %d], a multiple of %d", buffSizeGranule, maxBuffSize, buffSizeGranule)

var intSettings = []intSetting{
	{"NCCL_NCHANNELS", "NChannels", func(c *Config) *int { return &c.NChannels }, inRange(1, MaxChannels), channelsWant},
	{"NCCL_MIN_NCHANNELS", "MinNChannels", func(c *Config) *int { return &c.MinNChannels }, inRange(1, MaxChannels), channelsWant},
	{"NCCL_MAX_NCHANNELS", "MaxNChannels", func(c *Config) *int { return &c.MaxNChannels }, inRange(1, MaxChannels), channelsWant},
	{"NCCL_BUFFSIZE", "BuffSize", func(c *Config) *int { return &c.BuffSize }, multipleIn(buffSizeGranule, buffSizeGranule, maxBuffSize), buffWant},
	{"NCCLGO_NET_BUFFSIZE", "NetBuffSize", func(c *Config) *int { return &c.NetBuffSize }, multipleIn(buffSizeGranule, buffSizeGranule, maxBuffSize), buffWant},
	{"NCCL_LL_BUFFSIZE", "LLBuffSize", func(c *Config) *int { return &c.LLBuffSize }, multipleIn(buffSizeGranule, buffSizeGranule, maxBuffSize), buffWant},
	{"NCCL_LL128_BUFFSIZE", "LL128BuffSize", func(c *Config) *int { return &c.LL128BuffSize }, multipleIn(ll128Granule, ll128Granule, maxBuffSize),
		fmt.Sprintf("a byte count in [%d, %d], a multiple of %d (LL128 lines)", ll128Granule, maxBuffSize, ll128Granule)},
	{"NCCL_NTHREADS", "NThreads", func(c *Config) *int { return &c.NThreads }, multipleIn(WarpSize, minNThreads, MaxNThreads),
		fmt.Sprintf("a multiple of %d in [%d, %d]", WarpSize, minNThreads, MaxNThreads)},
	{"NCCL_LL128_NTHREADS", "LL128NThreads", func(c *Config) *int { return &c.LL128NThreads }, multipleIn(WarpSize, minLL128NThreads, MaxLL128NThreads),
		fmt.Sprintf("a multiple of %d in [%d, %d]", WarpSize, minLL128NThreads, MaxLL128NThreads)},
}

type boolSetting struct {
	env   string
	field func(*Config) *bool
}

var boolSettings = []boolSetting{
	{"NCCL_P2P_DISABLE", func(c *Config) *bool { return &c.P2PDisable }},
	{"NCCL_SHM_DISABLE", func(c *Config) *bool { return &c.SHMDisable }},
	{"NCCL_IB_DISABLE", func(c *Config) *bool { return &c.IBDisable }},
	{"NCCL_NVLS_ENABLE", func(c *Config) *bool { return &c.NVLSEnable }},
}
