package bootstrap

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelectInterfaces(t *testing.T) {
	ip := netip.MustParseAddr
	ifs := []ifaceAddrs{
		{name: "lo", up: true, loopback: true, addrs: []netip.Addr{ip("127.0.0.1"), ip("::1")}},
		{name: "docker0", up: true, addrs: []netip.Addr{ip("172.17.0.1")}},
		{name: "eth0", up: true, addrs: []netip.Addr{ip("10.0.0.1")}},
		{name: "eth1", up: true, addrs: []netip.Addr{ip("fe80::1%eth1"), ip("2001:db8::1"), ip("10.0.0.2")}},
		{name: "eth2", up: false, addrs: []netip.Addr{ip("10.0.0.3")}},
	}
	names := func(spec string, fam, max int) []string {
		out, err := selectInterfaces(ifs, spec, fam, max)
		require.NoError(t, err)
		var s []string
		for _, i := range out {
			s = append(s, i.Name+"="+i.Addr.String())
		}
		return s
	}
	assert.Equal(t, []string{"eth0=10.0.0.1", "eth1=10.0.0.2"}, names("", 0, 16), "the first tier: real interfaces, up")
	assert.Equal(t, []string{"eth0=10.0.0.1"}, names("", 0, 1), "at most max")
	assert.Equal(t, []string{"eth1=2001:db8::1"}, names("", 6, 16), "IPv6 only")
	assert.Equal(t, []string{"lo=127.0.0.1"}, names("lo", 0, 16))
	assert.Equal(t, []string{"lo=::1"}, names("=lo", 6, 16))
	assert.Equal(t, []string{"lo=127.0.0.1", "docker0=172.17.0.1"}, names("^eth", 0, 16))
	_, err := selectInterfaces(ifs, "ib", 0, 16)
	require.ErrorContains(t, err, `NCCL_SOCKET_IFNAME="ib"`)
	_, err = selectInterfaces(ifs, "", 0, 0)
	require.ErrorContains(t, err, "at most 0 interfaces")
	out, err := selectInterfaces(nil, "", 0, 4)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", out[0].Addr.String(), "nothing up: loopback")
	_, err = SelectInterfaces("", "AF_UNIX", 4)
	require.ErrorContains(t, err, "AF_UNIX")
}
