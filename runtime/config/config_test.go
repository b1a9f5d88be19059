package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	assert.Equal(t, Default(), c)
	assert.Equal(t, 4<<20, c.BuffSize)
	assert.Equal(t, 524288, c.LLBuffSize)
	assert.Equal(t, 4915200, c.LL128BuffSize)
	assert.False(t, c.NVLSEnable, "multicast stays off unless asked for")
	assert.Equal(t, DebugNone, c.Debug)
	assert.Equal(t, SubsysInit|SubsysBootstrap|SubsysEnv, c.DebugSubsys)
	assert.Equal(t, LaunchParallel, c.LaunchMode)
	assert.False(t, c.Algo.IsSet())
}

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"NCCL_ALGO":           "ring;allreduce:tree",
		"NCCL_PROTO":          "^LL128",
		"NCCL_NCHANNELS":      "8",
		"NCCL_MIN_NCHANNELS":  "2",
		"NCCL_MAX_NCHANNELS":  "0x10",
		"NCCL_BUFFSIZE":       "1048576",
		"NCCL_LL_BUFFSIZE":    "262144",
		"NCCL_LL128_BUFFSIZE": "2457600",
		"NCCL_NTHREADS":       "256",
		"NCCL_LL128_NTHREADS": "320",
		"NCCL_P2P_DISABLE":    "1",
		"NCCL_SHM_DISABLE":    "0",
		"NCCL_IB_DISABLE":     "1",
		"NCCL_SOCKET_IFNAME":  "^docker,lo",
		"NCCL_SOCKET_FAMILY":  "af_inet6",
		"NCCL_HOSTID":         "fake-host-1",
		"NCCL_NVLS_ENABLE":    "1",
		"NCCL_LAUNCH_MODE":    "group",
		"NCCL_DEBUG":          "info",
		"NCCL_DEBUG_SUBSYS":   "INIT,tuning",
		"NCCL_DEBUG_FILE":     "/tmp/nccl.%h.%p",
		"NCCL_UNRELATED":      "whatever",
	}))
	require.NoError(t, err)
	assert.Equal(t, []kspace.Algo{kspace.Tree}, c.Algo.Allowed(kspace.AllReduce))
	assert.Equal(t, []kspace.Algo{kspace.Ring}, c.Algo.Allowed(kspace.AllGather))
	assert.False(t, c.Proto.Allows(kspace.AllReduce, kspace.LL128))
	assert.Equal(t, 8, c.NChannels)
	assert.Equal(t, 2, c.MinNChannels)
	assert.Equal(t, 16, c.MaxNChannels)
	assert.Equal(t, 1<<20, c.BuffSize)
	assert.Equal(t, 262144, c.LLBuffSize)
	assert.Equal(t, 2457600, c.LL128BuffSize)
	assert.Equal(t, 256, c.NThreads)
	assert.Equal(t, 320, c.LL128NThreads)
	assert.True(t, c.P2PDisable)
	assert.False(t, c.SHMDisable)
	assert.True(t, c.IBDisable)
	assert.True(t, c.SocketIfname.Exclude)
	assert.Equal(t, "AF_INET6", c.SocketFamily)
	assert.Equal(t, "fake-host-1", c.HostID)
	assert.True(t, c.NVLSEnable)
	assert.Equal(t, LaunchGroup, c.LaunchMode)
	assert.Equal(t, DebugInfo, c.Debug)
	assert.Equal(t, SubsysInit|SubsysTuning, c.DebugSubsys)
	assert.Equal(t, "/tmp/nccl.%h.%p", c.DebugFile)
}

func TestFromEnvErrors(t *testing.T) {
	cases := []struct {
		env map[string]string
		msg string
	}{
		{map[string]string{"NCCL_NCHANNELS": "abc"}, `NCCL_NCHANNELS="abc": want an integer in [1, 64]`},
		{map[string]string{"NCCL_NCHANNELS": "65"}, `NCCL_NCHANNELS="65": want an integer in [1, 64]`},
		{map[string]string{"NCCL_MAX_NCHANNELS": "0"}, `NCCL_MAX_NCHANNELS="0": want an integer in [1, 64]`},
		{map[string]string{"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "4"}, `NCCL_MIN_NCHANNELS="8": want at most NCCL_MAX_NCHANNELS (4)`},
		{map[string]string{"NCCL_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "4"}, `NCCL_NCHANNELS="8": want at most NCCL_MAX_NCHANNELS (4)`},
		{map[string]string{"NCCL_BUFFSIZE": "1000"}, `NCCL_BUFFSIZE="1000": want a byte count in [1024, 1073741824], a multiple of 1024`},
		{map[string]string{"NCCL_NTHREADS": "100"}, `NCCL_NTHREADS="100": want a multiple of 32 in [64, 512]`},
		{map[string]string{"NCCL_LL128_NTHREADS": "1024"}, `NCCL_LL128_NTHREADS="1024": want a multiple of 32 in [160, 640]`},
		{map[string]string{"NCCL_P2P_DISABLE": "yes"}, `NCCL_P2P_DISABLE="yes": want 0 or 1`},
		{map[string]string{"NCCL_NVLS_ENABLE": "2"}, `NCCL_NVLS_ENABLE="2": want 0 or 1 (ncclgo never enables NVLS automatically`},
		{map[string]string{"NCCL_ALGO": "ring,foo"}, `NCCL_ALGO="ring,foo": unknown algorithm "foo"; valid: Tree, Ring,`},
		{map[string]string{"NCCL_PROTO": "allreduce:LL;Simple"}, `NCCL_PROTO="allreduce:LL;Simple": section "Simple" lacks a collective prefix`},
		{map[string]string{"NCCL_DEBUG": "LOUD"}, `NCCL_DEBUG="LOUD": want VERSION, WARN, INFO, ABORT or TRACE`},
		{map[string]string{"NCCL_DEBUG_SUBSYS": "INIT,GRAFF"}, `NCCL_DEBUG_SUBSYS="INIT,GRAFF": unknown subsystem "GRAFF"; want INIT, COLL,`},
		{map[string]string{"NCCL_LAUNCH_MODE": "SERIAL"}, `NCCL_LAUNCH_MODE="SERIAL": want PARALLEL or GROUP`},
		{map[string]string{"NCCL_SOCKET_FAMILY": "AF_UNIX"}, `NCCL_SOCKET_FAMILY="AF_UNIX": want AF_INET or AF_INET6`},
	}
	for _, c := range cases {
		t.Run(c.msg, func(t *testing.T) {
			_, err := FromEnv(env(c.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
			assert.True(t, errors.Is(err, ErrInvalid))
			var se *SettingError
			assert.True(t, errors.As(err, &se))
		})
	}
}

func TestFromEnvReportsAllErrors(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"NCCL_NCHANNELS": "x", "NCCL_PROTO": "LL9"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NCCL_NCHANNELS")
	assert.Contains(t, err.Error(), "NCCL_PROTO")
	assert.True(t, errors.Is(err, ErrSelection))
}

func TestEmptyValuesKeepDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"NCCL_NCHANNELS": "", "NCCL_ALGO": " ", "NCCL_BUFFSIZE": ""}))
	require.NoError(t, err)
	assert.Equal(t, Default(), c)
}

func TestOverrides(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"NCCL_NCHANNELS": "4", "NCCL_P2P_DISABLE": "1", "NCCL_PROTO": "LL"}))
	require.NoError(t, err)
	c2, err := c.Apply(Overrides{NChannels: new(8), P2PDisable: new(false), Proto: new("^LL"), HostID: new("h2"), Debug: new(DebugWarn)})
	require.NoError(t, err)
	assert.Equal(t, 8, c2.NChannels)
	assert.False(t, c2.P2PDisable, "a program can turn off what the environment turned on")
	assert.False(t, c2.Proto.Allows(kspace.AllReduce, kspace.LL))
	assert.Equal(t, "h2", c2.HostID)
	assert.Equal(t, DebugWarn, c2.Debug)
	assert.Equal(t, 4, c.NChannels, "Apply does not modify its receiver")

	c3, err := c2.Apply(Overrides{NChannels: new(0)})
	require.NoError(t, err)
	assert.Equal(t, 0, c3.NChannels, "0 restores automatic")

	_, err = c.Apply(Overrides{NChannels: new(100)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Overrides.NChannels="100": want an integer in [1, 64]`)
	_, err = c.Apply(Overrides{Algo: new("bogus")})
	assert.Contains(t, err.Error(), `Overrides.Algo="bogus": unknown algorithm "bogus"`)
	_, err = c.Apply(Overrides{MinNChannels: new(9), MaxNChannels: new(3), NChannels: new(0)})
	assert.Contains(t, err.Error(), `Overrides.MinNChannels="9": want at most Overrides.MaxNChannels (3)`)
	assert.True(t, errors.Is(err, ErrInvalid))
}

func TestParseSubsys(t *testing.T) {
	cases := []struct {
		in   string
		want Subsys
	}{
		{"INIT", SubsysInit},
		{"init,Coll,P2P", SubsysInit | SubsysColl | SubsysP2P},
		{"ALL", SubsysAll},
		{"^INIT,ENV", SubsysAll &^ (SubsysInit | SubsysEnv)},
		{"^", SubsysAll},
		{"", 0},
		{"TUNING,,NVLS", SubsysTuning | SubsysNVLS},
	}
	for _, c := range cases {
		got, err := ParseSubsys(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	_, err := ParseSubsys("INIT,NOPE")
	assert.Error(t, err)
	assert.Equal(t, "INIT|ENV", (SubsysInit | SubsysEnv).String())
	assert.Equal(t, "ALL", SubsysAll.String())
	assert.Equal(t, "NONE", Subsys(0).String())
}

func TestDebugLevels(t *testing.T) {
	for _, c := range []struct {
		in    string
		level DebugLevel
		slog  slog.Level
	}{
		{"VERSION", DebugVersion, LevelVersion},
		{"warn", DebugWarn, slog.LevelWarn},
		{"Info", DebugInfo, slog.LevelInfo},
		{"ABORT", DebugAbort, slog.LevelInfo},
		{"TRACE", DebugTrace, slog.LevelDebug},
	} {
		l, err := ParseDebugLevel(c.in)
		require.NoError(t, err)
		assert.Equal(t, c.level, l)
		assert.Equal(t, c.slog, l.SlogLevel())
	}
	assert.Greater(t, DebugNone.SlogLevel(), LevelVersion)
}

func TestExpandDebugFile(t *testing.T) {
	assert.Equal(t, "/tmp/nccl.node1.42.log", ExpandDebugFile("/tmp/nccl.%h.%p.log", "node1", 42))
	assert.Equal(t, "a%b%x%", ExpandDebugFile("a%%b%x%", "h", 1))
}

func TestOpenDebugFile(t *testing.T) {
	c := Default()
	w, err := c.OpenDebugFile()
	require.NoError(t, err)
	require.NoError(t, w.Close())

	dir := t.TempDir()
	c.Debug, c.DebugFile = DebugInfo, dir+"/nccl.%p.log"
	w, err = c.OpenDebugFile()
	require.NoError(t, err)
	_, err = w.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, w.Close())

	c.DebugFile = dir + "/missing/dir/x"
	_, err = c.OpenDebugFile()
	assert.ErrorContains(t, err, "NCCL_DEBUG_FILE")
}

// TestDebugFileShared: two resolutions of the options in one process (the
// root's, then a rank's) used to create the debug file twice, the second
// truncating the first's lines and then writing over them. They share the
// file now, which the first open in the process truncates, a later one
// (after the last close) appends to, and the last Close closes.
func TestDebugFileShared(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fmt.Sprintf("nccl.%d.log", os.Getpid()))
	require.NoError(t, os.WriteFile(path, []byte("an earlier process's log\n"), 0o644))
	c := Default()
	c.Debug, c.DebugFile = DebugInfo, filepath.Join(dir, "nccl.%p.log")
	open := func() io.WriteCloser {
		t.Helper()
		w, err := c.OpenDebugFile()
		require.NoError(t, err)
		return w
	}
	write := func(w io.Writer, s string) {
		t.Helper()
		_, err := io.WriteString(w, s)
		require.NoError(t, err)
	}
	root := open()
	write(root, "root 1\n")
	rank := open()
	write(rank, "rank 1\n")
	write(root, "root 2\n")
	require.NoError(t, root.Close())
	require.NoError(t, root.Close(), "a second Close does nothing")
	write(rank, "rank 2\n")
	require.NoError(t, rank.Close())
	_, err := rank.Write([]byte("x"))
	require.Error(t, err, "the last Close closed the file")
	later := open() // a communicator made after the others were gone
	write(later, "later\n")
	require.NoError(t, later.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "root 1\nrank 1\nroot 2\nrank 2\nlater\n", string(b))
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	c := Default()
	c.Debug = DebugInfo
	c.DebugSubsys = SubsysInit | SubsysTuning
	log := NewLogger(c, &buf)

	log.Info("kept init", SubsysInit.Attr())
	log.Info("dropped net", SubsysNet.Attr())
	log.Debug("dropped trace", SubsysInit.Attr())
	log.Warn("kept warn", SubsysNet.Attr())
	log.Info("kept, no subsystem")
	log.Info("kept string subsys", SubsysKey, "TUNING")
	tl := log.With(SubsysTuning.Attr(), "rank", 3)
	tl.Info("kept bound")
	log.With(SubsysP2P.Attr()).Info("dropped bound p2p")
	log.With(SubsysP2P.Attr()).Info("kept, one of two subsystems", SubsysInit.Attr())
	log.WithGroup("g").Info("kept grouped", "k", "v w", SubsysInit.Attr())
	log.Log(context.Background(), LevelVersion, "NCCL version 2.30.7+ncclgo")

	out := buf.String()
	for _, s := range []string{"kept init", "kept warn", "kept, no subsystem", "kept string subsys", "kept bound", "kept, one of two", "kept grouped"} {
		assert.Contains(t, out, s)
	}
	for _, s := range []string{"dropped"} {
		assert.NotContains(t, out, s)
	}
	assert.Contains(t, out, "] NCCL INFO kept init")
	assert.Contains(t, out, "NCCL WARN kept warn")
	assert.Contains(t, out, "[3] NCCL INFO kept bound subsys=TUNING rank=3")
	assert.Contains(t, out, `g.k="v w"`)
	assert.Contains(t, out, "\nNCCL version 2.30.7+ncclgo\n")

	buf.Reset()
	c.Debug = DebugNone
	NewLogger(c, &buf).Warn("nothing")
	assert.Empty(t, buf.String())

	c.Debug = DebugTrace
	NewLogger(c, &buf).Debug("trace", SubsysInit.Attr())
	assert.True(t, strings.Contains(buf.String(), "NCCL TRACE trace"))
}

// TestBootstrapTimeout: NaN, infinities and sub-millisecond values used to
// pass (NaN became a −2562047 h timeout).
func TestBootstrapTimeout(t *testing.T) {
	for _, v := range []string{"NaN", "-nan", "Inf", "-Inf", "1e-12", "0.0009", "0", "-3", "604801", "1e308", "10s"} {
		_, err := FromEnv(env(map[string]string{"NCCL_BOOTSTRAP_TIMEOUT": v}))
		require.ErrorIs(t, err, ErrInvalid, v)
		require.ErrorContains(t, err, fmt.Sprintf("NCCL_BOOTSTRAP_TIMEOUT=%q: want a number of seconds in 0.001..604800", v))
	}
	c, err := FromEnv(env(map[string]string{"NCCL_BOOTSTRAP_TIMEOUT": "2.5"}))
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, c.BootstrapTimeout)
}

func TestIfnameFilter(t *testing.T) {
	cases := []struct {
		spec string
		yes  []string
		no   []string
	}{
		{"", []string{"eth0", "lo"}, nil},
		{"eth,ib", []string{"eth0", "ib1"}, []string{"lo", "enp1"}},
		{"^docker,lo", []string{"eth0"}, []string{"docker0", "lo"}},
		{"=eth0", []string{"eth0"}, []string{"eth01", "eth1"}},
		{"^=eth0", []string{"eth01", "lo"}, []string{"eth0"}},
		// The cases the bootstrap's former parser handled and this one
		// did not: NCCL's ":port" suffix.
		{"eth0:1234", []string{"eth0", "eth01"}, []string{"ib0"}},
		{"=eth0:1234,ib0:5", []string{"eth0", "ib0"}, []string{"eth01", "ib01"}},
		{" ib , lo ", []string{"ib0", "lo"}, []string{"eth0"}},
		{"^=eth0,eth1", []string{"eth10", "ib0"}, []string{"eth0", "eth1"}},
		{"^", []string{"eth0"}, nil},
	}
	for _, c := range cases {
		f := ParseIfnameFilter(c.spec)
		for _, n := range c.yes {
			assert.True(t, f.Match(n), "%q should match %q", c.spec, n)
		}
		for _, n := range c.no {
			assert.False(t, f.Match(n), "%q should not match %q", c.spec, n)
		}
		assert.Equal(t, c.spec, f.String())
	}
}

func TestNetBuffSize(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	assert.Equal(t, DefaultNetBuffSize, c.NetBuffSize)
	assert.Equal(t, DefaultBuffSize, c.SimpleBuffSize(1), "one host: NCCL_BUFFSIZE's default")
	assert.Equal(t, DefaultNetBuffSize, c.SimpleBuffSize(2), "across hosts")

	c, err = FromEnv(env(map[string]string{"NCCL_BUFFSIZE": "1048576"}))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, c.SimpleBuffSize(1))
	assert.Equal(t, 1<<20, c.SimpleBuffSize(3), "NCCL_BUFFSIZE alone holds across hosts too")

	c, err = FromEnv(env(map[string]string{"NCCL_BUFFSIZE": "1048576", "NCCLGO_NET_BUFFSIZE": "16777216"}))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, c.SimpleBuffSize(1))
	assert.Equal(t, 16<<20, c.SimpleBuffSize(2))

	_, err = FromEnv(env(map[string]string{"NCCLGO_NET_BUFFSIZE": "1000"}))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, `NCCLGO_NET_BUFFSIZE`)
	assert.ErrorContains(t, err, "a multiple of 1024")

	c, err = Default().Apply(Overrides{BuffSize: new(2 << 20)})
	require.NoError(t, err)
	assert.Equal(t, 2<<20, c.SimpleBuffSize(2), "Overrides.BuffSize alone holds across hosts")
	c, err = Default().Apply(Overrides{BuffSize: new(2 << 20), NetBuffSize: new(32 << 20)})
	require.NoError(t, err)
	assert.Equal(t, 2<<20, c.SimpleBuffSize(1))
	assert.Equal(t, 32<<20, c.SimpleBuffSize(2))
}
