package config

import "strings"

// IfnameFilter is a parsed NCCL_SOCKET_IFNAME: a comma-separated list of
// interface-name prefixes; a leading '^' excludes the listed interfaces
// instead, and a '=' (after any '^') makes the names exact rather than
// prefixes. "eth,ib" uses eth* and ib*; "^docker,lo" everything else;
// "=eth0" only eth0; "^=docker0" everything but docker0. As in NCCL, an
// entry may carry a ":port" suffix, which interface selection ignores
// ("eth0:1234" is "eth0"). Blanks around entries are ignored. The zero
// filter matches every interface (NCCL then prefers ib*, then anything but
// docker* and lo, which is the caller's policy). This is the one parser of
// NCCL_SOCKET_IFNAME: package bootstrap uses it too.
type IfnameFilter struct {
	spec    string
	Exclude bool     // '^': the names are excluded
	Exact   bool     // '=': the names match whole
	Names   []string // the listed names or prefixes
}

// ParseIfnameFilter parses an NCCL_SOCKET_IFNAME value. It cannot fail: as
// in NCCL, any string is a list of names.
func ParseIfnameFilter(spec string) IfnameFilter {
	f := IfnameFilter{spec: spec}
	s := strings.TrimSpace(spec)
	if strings.HasPrefix(s, "^") {
		f.Exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		f.Exact, s = true, s[1:]
	}
	for n := range strings.SplitSeq(s, ",") {
		if i := strings.IndexByte(n, ':'); i >= 0 {
			n = n[:i]
		}
		if n = strings.TrimSpace(n); n != "" {
			f.Names = append(f.Names, n)
		}
	}
	return f
}

// IsSet reports whether the filter came from a non-empty value.
func (f IfnameFilter) IsSet() bool { return len(f.Names) > 0 }

// Match reports whether the filter lets interface name through.
func (f IfnameFilter) Match(name string) bool {
	if !f.IsSet() {
		return true
	}
	hit := false
	for _, n := range f.Names {
		if f.Exact && name == n || !f.Exact && strings.HasPrefix(name, n) {
			hit = true
			break
		}
	}
	return hit != f.Exclude
}

// String returns the value the filter was parsed from.
func (f IfnameFilter) String() string { return f.spec }
