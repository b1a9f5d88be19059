package bootstrap

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ncclgo/ncclgo/runtime/config"
)

// Interface is a network interface and the address sockets bind on it.
type Interface struct {
	Name string
	Addr netip.Addr
}

// SelectInterfaces lists up to max up interfaces with a usable address, in
// NCCL's order, for the socket transport (runtime/net). spec selects them
// with NCCL_SOCKET_IFNAME's grammar (empty: the NCCL_SOCKET_IFNAME
// variable, and when that is empty too, the interfaces that are neither
// loopback nor docker*/virbr*, else the virtual ones, else loopback);
// family is "AF_INET", "AF_INET6" or empty (NCCL_SOCKET_FAMILY, else
// either, IPv4 preferred within an interface). It is pickAddr's policy,
// returning every interface of the first tier that has any.
func SelectInterfaces(spec, family string, max int) ([]Interface, error) {
	o := Options{Interface: spec, Family: family}
	fam, err := o.family()
	if err != nil {
		return nil, err
	}
	ifs, err := systemInterfaces()
	if err != nil {
		return nil, err
	}
	return selectInterfaces(ifs, o.ifaceSpec(), fam, max)
}

func selectInterfaces(ifs []ifaceAddrs, spec string, family, max int) ([]Interface, error) {
	if max < 1 {
		return nil, fmt.Errorf("bootstrap: selecting at most %d interfaces: want at least 1", max)
	}
	tier := func(sel func(ifaceAddrs) bool) []Interface {
		var out []Interface
		for _, ifc := range ifs {
			if len(out) == max {
				break
			}
			if !ifc.up || !sel(ifc) {
				continue
			}
			if a, ok := bestAddr(ifc.addrs, family); ok {
				out = append(out, Interface{Name: ifc.name, Addr: a})
			}
		}
		return out
	}
	if strings.TrimSpace(spec) != "" {
		m := config.ParseIfnameFilter(spec)
		if out := tier(func(i ifaceAddrs) bool { return m.Match(i.name) }); len(out) > 0 {
			return out, nil
		}
		// pickAddr's error names the interfaces and the grammar.
		_, _, err := pickAddr(ifs, spec, family)
		return nil, err
	}
	virtual := func(n string) bool { return strings.HasPrefix(n, "docker") || strings.HasPrefix(n, "virbr") }
	for _, sel := range []func(ifaceAddrs) bool{
		func(i ifaceAddrs) bool { return !i.loopback && !virtual(i.name) },
		func(i ifaceAddrs) bool { return !i.loopback },
		func(i ifaceAddrs) bool { return i.loopback },
	} {
		if out := tier(sel); len(out) > 0 {
			return out, nil
		}
	}
	if family == 6 {
		return []Interface{{Addr: netip.IPv6Loopback()}}, nil
	}
	return []Interface{{Addr: netip.AddrFrom4([4]byte{127, 0, 0, 1})}}, nil
}
