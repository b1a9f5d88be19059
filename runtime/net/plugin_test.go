package net

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/net/nettest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// records keeps the log records it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) find(msg string) (slog.Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Message == msg {
			return rec, true
		}
	}
	return slog.Record{}, false
}

func TestPluginVersions(t *testing.T) {
	for _, v := range PluginVersions {
		t.Run("v"+strconv.Itoa(v), func(t *testing.T) {
			logs := &records{}
			path := nettest.BuildPlugin(t, "v"+strconv.Itoa(v), "NET_VERSION="+strconv.Itoa(v))
			p, err := LoadPlugin(path, PluginOptions{Logger: slog.New(logs)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			assert.Equal(t, v, p.Version())
			assert.Equal(t, "TestSock", p.Name())
			assert.Equal(t, path, p.Path())
			require.Equal(t, 1, p.Devices())
			pr, err := p.Properties(0)
			require.NoError(t, err)
			assert.Equal(t, Properties{Name: "lo", GUID: 0x7e57, PtrSupport: PtrHost, Speed: 10000, Latency: 1.5, MaxComms: 1024, MaxRecvs: 1}, pr)
			_, err = p.Properties(1)
			require.ErrorContains(t, err, "device 1: want 0 to 0")

			// The plugin's init line came through the logger, with its
			// level and subsystem.
			rec, ok := logs.find("TestSock: ABI v" + strconv.Itoa(v) + " ready")
			require.True(t, ok, "the plugin's init log line")
			assert.Equal(t, slog.LevelInfo, rec.Level)
			rec.Attrs(func(a slog.Attr) bool {
				if a.Key == config.SubsysKey {
					assert.Equal(t, config.SubsysNet, a.Value.Any())
				}
				return true
			})

			testMessages(t, p, cMem)
			testRefusals(t, p, cMem)
			testVanishedSender(t, p, cMem)
			testVanishedReceiver(t, p, cMem)
		})
	}
}

func TestPluginLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl-net-gone.so")
	_, err := LoadPlugin(missing, PluginOptions{})
	require.ErrorIs(t, err, ErrNoPlugin)
	require.ErrorContains(t, err, `NCCL_NET_PLUGIN="`+missing+`": could not open `+missing+" (")

	_, err = LoadPlugin("nosuchvendor", PluginOptions{})
	require.ErrorIs(t, err, ErrNoPlugin)
	require.ErrorContains(t, err, "could not open nosuchvendor (")
	require.ErrorContains(t, err, "nor libnccl-net-nosuchvendor.so (")

	_, err = LoadPlugin(nettest.BuildPlugin(t, "nosym", "NO_EXPORT"), PluginOptions{})
	require.ErrorContains(t, err, "exports none of the supported versions (looked for ncclNetPlugin_v10, ncclNetPlugin_v9, ncclNetPlugin_v8)")
	require.NotErrorIs(t, err, ErrNoPlugin)

	_, err = LoadPlugin(nettest.BuildPlugin(t, "failinit", "FAIL_INIT"), PluginOptions{})
	require.ErrorContains(t, err, "TestSock: init returned ncclSystemError (2); its last warning: TestSock: init told to fail")
	var pe *PluginError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 2, pe.Code)
	assert.NotErrorIs(t, err, ErrPeer)
}

func TestPluginMisuse(t *testing.T) {
	p, err := LoadPlugin(nettest.BuildPlugin(t, "misuse"), PluginOptions{})
	require.NoError(t, err)
	sc, rc := pair(t, p)
	buf := cMem(t)(64)
	mh, err := rc.RegMr(buf, PtrHost)
	require.NoError(t, err)
	_, err = sc.Isend(buf, 0, mh)
	require.ErrorContains(t, err, "is not a registration of this connection")
	require.ErrorContains(t, sc.DeregMr(mh), "not a registration of this connection")
	// The plugin checks buffers against their registration.
	_, err = rc.Irecv(cMem(t)(8), 0, mh)
	require.ErrorContains(t, err, "irecv returned ncclInvalidArgument (4)")
	require.ErrorContains(t, err, "outside its registration")
	require.NoError(t, rc.DeregMr(mh))
	_, err = p.Accept(fakeListener{})
	require.ErrorContains(t, err, "not one of its listeners")
	_, _, err = p.Listen(3)
	require.ErrorContains(t, err, "device 3: want 0 to 0")
	require.NoError(t, p.Close())
	_, err = p.Connect(0, Handle{})
	require.ErrorIs(t, err, ErrClosed)
}

type fakeListener struct{}

func (fakeListener) Close() error { return nil }

// TestPluginFromEnv checks NCCL's variables. The cases that search the
// library path (an unset NCCL_NET_PLUGIN, a bare name) run in a child
// process whose LD_LIBRARY_PATH holds the test plugins.
func TestPluginFromEnv(t *testing.T) {
	if dir := os.Getenv("NGNET_TEST_PLUGIN_DIR"); dir != "" {
		fromEnvByName(t)
		return
	}
	env := envmap.Getenv
	path := nettest.BuildPlugin(t, "env")
	n, err := FromEnv(env("NCCL_NET_PLUGIN", path, "NCCL_SOCKET_IFNAME", "lo"))
	require.NoError(t, err)
	require.IsType(t, &Plugin{}, n)
	n, err = FromEnv(env("NCCL_NET_PLUGIN", path, "NCCL_NET", "testsock"))
	require.NoError(t, err, "NCCL_NET matches the plugin's name case-insensitively")
	require.IsType(t, &Plugin{}, n)
	n, err = FromEnv(env("NCCL_NET_PLUGIN", path, "NCCL_NET", "Socket", "NCCL_SOCKET_IFNAME", "lo"))
	require.NoError(t, err)
	require.IsType(t, &Socket{}, n)
	n, err = FromEnv(env("NCCL_NET_PLUGIN", "none", "NCCL_SOCKET_IFNAME", "lo"))
	require.NoError(t, err)
	require.IsType(t, &Socket{}, n)
	_, err = FromEnv(env("NCCL_NET_PLUGIN", path, "NCCL_NET", "IB"))
	require.ErrorContains(t, err, `NCCL_NET="IB": the plugin `+path+` is "TestSock"; want its name or Socket`)
	_, err = FromEnv(env("NCCL_NET_PLUGIN", "nosuchvendor"))
	require.ErrorIs(t, err, ErrNoPlugin)
	require.ErrorContains(t, err, "libnccl-net-nosuchvendor.so")
	_, err = FromEnv(env("NCCL_NET_PLUGIN", nettest.BuildPlugin(t, "envfail", "FAIL_INIT")))
	require.ErrorContains(t, err, "init returned ncclSystemError (2)")

	// The child: LD_LIBRARY_PATH with libnccl-net.so and
	// libnccl-net-bare.so.
	dir := filepath.Dir(nettest.BuildPlugin(t, "bare", "NET_VERSION=9"))
	require.NoError(t, os.Rename(nettest.BuildPlugin(t, "default", "NET_VERSION=8"), filepath.Join(dir, "libnccl-net.so")))
	cmd := exec.Command(os.Args[0], "-test.run=^TestPluginFromEnv$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "NGNET_TEST_PLUGIN_DIR="+dir, "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestPluginFromEnv")
}

func fromEnvByName(t *testing.T) {
	env := func(plugin string) func(string) string {
		return func(k string) string {
			if k == "NCCL_NET_PLUGIN" {
				return plugin
			}
			return ""
		}
	}
	n, err := FromEnv(env(""))
	require.NoError(t, err)
	require.IsType(t, &Plugin{}, n, "unset NCCL_NET_PLUGIN loads libnccl-net.so")
	assert.Equal(t, 8, n.(*Plugin).Version())
	n, err = FromEnv(env("bare"))
	require.NoError(t, err)
	require.IsType(t, &Plugin{}, n)
	assert.Equal(t, "libnccl-net-bare.so", n.(*Plugin).Path())
	assert.Equal(t, 9, n.(*Plugin).Version())
}
