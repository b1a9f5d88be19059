package bootstrap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPickAddr(t *testing.T) {
	ip := netip.MustParseAddr
	ifs := []ifaceAddrs{
		{name: "lo", up: true, loopback: true, addrs: []netip.Addr{ip("127.0.0.1"), ip("::1")}},
		{name: "docker0", up: true, addrs: []netip.Addr{ip("172.17.0.1")}},
		{name: "eth0", up: false, addrs: []netip.Addr{ip("10.0.0.1")}},
		{name: "eth1", up: true, addrs: []netip.Addr{ip("fe80::1%eth1"), ip("2001:db8::1"), ip("10.0.0.2")}},
	}
	pick := func(spec string, fam int) string {
		a, _, err := pickAddr(ifs, spec, fam)
		require.NoError(t, err)
		return a.String()
	}
	assert.Equal(t, "10.0.0.2", pick("", 0), "first up non-loopback, IPv4 preferred")
	assert.Equal(t, "2001:db8::1", pick("", 6))
	assert.Equal(t, "127.0.0.1", pick("lo", 0))
	assert.Equal(t, "::1", pick("=lo", 6))
	assert.Equal(t, "172.17.0.1", pick("^eth,lo", 0))
	// The grammar is config.ParseIfnameFilter's (one parser for both).
	assert.Equal(t, "10.0.0.2", pick("eth1:1234", 0), "a :port suffix is ignored")
	assert.Equal(t, "172.17.0.1", pick(" ^=eth1 , lo ", 0))
	assert.Equal(t, "172.17.0.1", pickNoEth(t, ifs), "docker before loopback")
	_, _, err := pickAddr(ifs, "ib", 0)
	require.ErrorContains(t, err, `NCCL_SOCKET_IFNAME="ib"`)
	require.ErrorContains(t, err, "interfaces: lo, docker0, eth0, eth1")
	a, _, err := pickAddr(nil, "", 0)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", a.String(), "nothing up: loopback")
}

// pickNoEth drops the eth interfaces: docker comes before loopback.
func pickNoEth(t *testing.T, ifs []ifaceAddrs) string {
	t.Helper()
	a, _, err := pickAddr(ifs[:2], "", 0)
	require.NoError(t, err)
	return a.String()
}

func TestTimeoutResolution(t *testing.T) {
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "")
	d, err := Options{}.timeout()
	require.NoError(t, err)
	assert.Equal(t, DefaultTimeout, d)
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "2.5")
	d, err = Options{}.timeout()
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, d)
	d, err = Options{Timeout: time.Second}.timeout()
	require.NoError(t, err)
	assert.Equal(t, time.Second, d, "Options override the environment")
	t.Setenv("NCCL_BOOTSTRAP_TIMEOUT", "-1")
	_, err = Options{}.timeout()
	require.ErrorContains(t, err, "want a number of seconds in 0.001..604800")
	_, err = Options{Family: "AF_UNIX"}.family()
	require.ErrorContains(t, err, "want AF_INET or AF_INET6")
	// One grammar with runtime/config's (config.ParseSocketFamily): NCCL's
	// two names, in any case.
	for in, want := range map[string]int{"": 0, "af_inet": 4, " AF_INET6 ": 6} {
		f, err := Options{Family: in}.family()
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, f, "%q", in)
	}
	for _, in := range []string{"INET", "4", "IPV6"} {
		_, err := Options{Family: in}.family()
		require.ErrorContains(t, err, "want AF_INET or AF_INET6", "%q", in)
	}
}
