package bootstrap

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/ncclgo/ncclgo/runtime/config"
)

// ifaceAddrs is what interface selection needs to know of an interface.
type ifaceAddrs struct {
	name     string
	up       bool
	loopback bool
	addrs    []netip.Addr
}

// systemInterfaces lists the host's interfaces.
func systemInterfaces() ([]ifaceAddrs, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listing interfaces: %w", err)
	}
	out := make([]ifaceAddrs, 0, len(ifs))
	for _, ifc := range ifs {
		ia := ifaceAddrs{name: ifc.Name, up: ifc.Flags&net.FlagUp != 0, loopback: ifc.Flags&net.FlagLoopback != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			pfx, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(pfx.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.Is6() && ip.IsLinkLocalUnicast() {
				ip = ip.WithZone(ifc.Name)
			}
			ia.addrs = append(ia.addrs, ip)
		}
		out = append(out, ia)
	}
	return out, nil
}

// pickAddr returns the address of the interface to use, NCCL style: with a
// spec, the first up interface it selects; without one, the first up
// non-loopback interface that is not docker*/virbr*, then docker*/virbr*,
// then loopback. family is 0 (either, IPv4 preferred), 4 or 6. Within an
// interface, global addresses are preferred over IPv6 link-local ones.
func pickAddr(ifs []ifaceAddrs, spec string, family int) (netip.Addr, string, error) {
	candidates := func(sel func(ifaceAddrs) bool) (netip.Addr, string, bool) {
		for _, ifc := range ifs {
			if !ifc.up || !sel(ifc) {
				continue
			}
			if a, ok := bestAddr(ifc.addrs, family); ok {
				return a, ifc.name, true
			}
		}
		return netip.Addr{}, "", false
	}
	if strings.TrimSpace(spec) != "" {
		m := config.ParseIfnameFilter(spec)
		if a, name, ok := candidates(func(i ifaceAddrs) bool { return m.Match(i.name) }); ok {
			return a, name, nil
		}
		names := make([]string, 0, len(ifs))
		for _, i := range ifs {
			names = append(names, i.name)
		}
		return netip.Addr{}, "", fmt.Errorf("bootstrap: no up interface with a usable address matches %s=%q (interfaces: %s; grammar: prefixes separated by ',', leading '^' excludes, '=' matches exactly)",
			envIfName, spec, strings.Join(names, ", "))
	}
	virtual := func(n string) bool { return strings.HasPrefix(n, "docker") || strings.HasPrefix(n, "virbr") }
	if a, name, ok := candidates(func(i ifaceAddrs) bool { return !i.loopback && !virtual(i.name) }); ok {
		return a, name, nil
	}
	if a, name, ok := candidates(func(i ifaceAddrs) bool { return !i.loopback }); ok {
		return a, name, nil
	}
	if a, name, ok := candidates(func(i ifaceAddrs) bool { return i.loopback }); ok {
		return a, name, nil
	}
	if family == 6 {
		return netip.IPv6Loopback(), "", nil
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), "", nil
}

func bestAddr(addrs []netip.Addr, family int) (netip.Addr, bool) {
	var ll netip.Addr
	for _, pass := range []int{4, 6} {
		if family != 0 && family != pass {
			continue
		}
		for _, a := range addrs {
			if (pass == 4) != a.Is4() {
				continue
			}
			if a.IsLinkLocalUnicast() && a.Is6() {
				if !ll.IsValid() {
					ll = a
				}
				continue
			}
			return a, true
		}
	}
	return ll, ll.IsValid()
}

// rootListenAddr resolves where NewRoot listens: Options.Addr, else
// NCCL_COMM_ID, else the selected interface with port 0.
func rootListenAddr(o Options) (string, error) {
	if o.Addr != "" {
		return o.Addr, nil
	}
	if v := strings.TrimSpace(os.Getenv(envCommID)); v != "" {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return "", fmt.Errorf("bootstrap: %s=%q: want \"ip:port\" or \"[ipv6]:port\": %w", envCommID, v, err)
		}
		return v, nil
	}
	fam, err := o.family()
	if err != nil {
		return "", err
	}
	ifs, err := systemInterfaces()
	if err != nil {
		return "", err
	}
	a, _, err := pickAddr(ifs, o.ifaceSpec(), fam)
	if err != nil {
		return "", err
	}
	return netip.AddrPortFrom(a, 0).String(), nil
}
