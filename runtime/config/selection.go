package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ncclgo/ncclgo/kspace"
)

// Elem is what a Selection chooses among: an algorithm or a protocol.
type Elem interface{ kspace.Algo | kspace.Proto }

// Selection is a parsed NCCL_ALGO or NCCL_PROTO value: which algorithms (or
// protocols) each collective may use. The zero Selection allows everything,
// as an unset variable does.
//
// The grammar is NCCL's (2.19 and later, src/graph/tuning.cc parseList):
//
//	value   = section { ";" section }
//	section = [ coll ":" ] [ "^" ] name { "," name }
//
// Names are case-insensitive. A list names what is allowed; a list that
// starts with "^" names what is excluded, everything else being allowed. The
// first section may omit the collective prefix and then applies to every
// collective; each later section needs a prefix and replaces, for that
// collective only, what earlier sections said. For example
//
//	NCCL_ALGO="ring;allreduce:tree,ring"   RING everywhere, AllReduce may also use TREE
//	NCCL_PROTO="^LL128;allreduce:LL128"     all but LL128, but only LL128 for AllReduce
//	NCCL_PROTO="LL,Simple;allreduce:^LL"    LL and SIMPLE, AllReduce all but LL
//
// Algorithm names are NCCL's (Tree, Ring, CollNetDirect, CollNetChain, NVLS,
// NVLSTree, PAT) and ncclgo's Direct (kspace.Direct), or kspace's spellings
// (COLLNET_DIRECT, NVLS_TREE, DIRECT); the pre-2.12 name CollNet stands for
// both CollNet algorithms. Protocol names
// are LL, LL128 and Simple. Prefixes are the collectives' names (AllReduce,
// AllGather, ReduceScatter, Broadcast, Reduce, AllGatherV, SendRecv; also
// in kspace's snake_case, all_reduce).
//
// Two ncclgo specifics: as in NCCL, these variables do not steer
// point-to-point operations, so an unprefixed section leaves SendRecv alone;
// a "sendrecv:" section (an ncclgo extension, NCCL_PROTO only) restricts the
// protocols SendRecv may use. And where NCCL silently accepts a list that
// names nothing ("allreduce:" or ","), ncclgo reports an error.
type Selection[E Elem] struct {
	spec string
	set  bool
	// deny holds, per collective, a bit per excluded element, so that the
	// zero value allows everything.
	deny [kspace.NumColls]uint32
}

// AlgoSelection is a parsed NCCL_ALGO.
type AlgoSelection = Selection[kspace.Algo]

// ProtoSelection is a parsed NCCL_PROTO.
type ProtoSelection = Selection[kspace.Proto]

// ErrSelection is wrapped by every error from ParseAlgoSelection and
// ParseProtoSelection.
var ErrSelection = errors.New("invalid selection")

// ncclAlgoNames are NCCL's ncclAlgoStr, indexed by kspace.Algo (whose values
// are NCCL's).
var ncclAlgoNames = kspace.AlgoNCCLNames()

// ncclProtoNames are NCCL's ncclProtoStr, indexed by kspace.Proto.
var ncclProtoNames = kspace.ProtoNCCLNames()

// elemInfo describes the element type of a selection.
type elemInfo struct {
	kind    string // "algorithm" or "protocol"
	env     string // the environment variable
	n       int
	names   []string            // NCCL's names, by value
	aliases map[string][]string // lower-case alias -> NCCL names
	// prefixOK reports whether a collective may appear as a prefix.
	prefixOK func(kspace.Coll) bool
	// global reports whether an unprefixed section applies to a collective.
	global func(kspace.Coll) bool
}

func infoOf[E Elem]() *elemInfo {
	var z E
	if _, ok := any(z).(kspace.Algo); ok {
		return &algoInfo
	}
	return &protoInfo
}

var notSendRecv = func(c kspace.Coll) bool { return c != kspace.SendRecv }

var algoInfo = elemInfo{
	kind: "algorithm", env: "NCCL_ALGO", n: int(kspace.NumAlgos), names: ncclAlgoNames[:],
	aliases:  map[string][]string{"collnet": {"CollNetDirect", "CollNetChain"}},
	prefixOK: func(c kspace.Coll) bool { return len(kspace.AlgosOf[c]) > 0 },
	global:   notSendRecv,
}

var protoInfo = elemInfo{
	kind: "protocol", env: "NCCL_PROTO", n: int(kspace.NumProtos), names: ncclProtoNames[:],
	prefixOK: func(kspace.Coll) bool { return true },
	global:   notSendRecv,
}

// lookup maps a (trimmed) name onto a bit mask of elements.
func (in *elemInfo) lookup(name string) (uint32, bool) {
	l := strings.ToLower(name)
	for i, n := range in.names {
		if l == strings.ToLower(n) || l == strings.ToLower(in.elemString(i)) {
			return 1 << i, true
		}
	}
	if al, ok := in.aliases[l]; ok {
		var m uint32
		for _, a := range al {
			b, _ := in.lookup(a)
			m |= b
		}
		return m, true
	}
	return 0, false
}

func (in *elemInfo) elemString(i int) string {
	if in == &algoInfo {
		return kspace.Algo(i).String()
	}
	return kspace.Proto(i).String()
}

func (in *elemInfo) valid() string {
	s := strings.Join(in.names, ", ")
	if len(in.aliases) > 0 {
		var al []string
		for k, v := range in.aliases {
			al = append(al, fmt.Sprintf("%s = %s", k, strings.Join(v, "+")))
		}
		s += " (alias " + strings.Join(al, ", ") + ")"
	}
	return s
}

func (in *elemInfo) all() uint32 { return 1<<in.n - 1 }

// ParseAlgoSelection parses an NCCL_ALGO value (see Selection). The empty
// value allows everything.
func ParseAlgoSelection(spec string) (AlgoSelection, error) { return parseSelection[kspace.Algo](spec) }

// ParseProtoSelection parses an NCCL_PROTO value (see Selection). The empty
// value allows everything.
func ParseProtoSelection(spec string) (ProtoSelection, error) {
	return parseSelection[kspace.Proto](spec)
}

func collNames(ok func(kspace.Coll) bool) string {
	var s []string
	for c := kspace.Coll(0); c < kspace.NumColls; c++ {
		if ok(c) {
			s = append(s, c.String())
		}
	}
	return strings.Join(s, ", ")
}

func lookupColl(name string, ok func(kspace.Coll) bool) (kspace.Coll, bool) {
	for c := kspace.Coll(0); c < kspace.NumColls; c++ {
		if ok(c) && (strings.EqualFold(name, c.String()) || strings.EqualFold(name, c.Lower())) {
			return c, true
		}
	}
	return 0, false
}

func parseSelection[E Elem](spec string) (Selection[E], error) {
	in := infoOf[E]()
	s := Selection[E]{spec: spec}
	if strings.TrimSpace(spec) == "" {
		return s, nil
	}
	s.set = true
	first := true
	for sec := range strings.SplitSeq(spec, ";") {
		sec = strings.TrimSpace(sec)
		if sec == "" {
			continue // NCCL's strtok skips empty sections
		}
		prefix, list, hasPrefix := strings.Cut(sec, ":")
		targets := in.global
		if hasPrefix {
			prefix = strings.TrimSpace(prefix)
			c, ok := lookupColl(prefix, in.prefixOK)
			if !ok {
				return Selection[E]{}, fmt.Errorf("%w: unknown collective %q in section %q; valid prefixes: %s",
					ErrSelection, prefix, sec, collNames(in.prefixOK))
			}
			targets = func(x kspace.Coll) bool { return x == c }
			if strings.Contains(list, ":") {
				return Selection[E]{}, fmt.Errorf("%w: section %q has more than one ':'", ErrSelection, sec)
			}
		} else if list = sec; !first {
			return Selection[E]{}, fmt.Errorf("%w: section %q lacks a collective prefix (only the first section may omit it, e.g. \"ring;allreduce:tree\")",
				ErrSelection, sec)
		}
		first = false
		deny, err := parseList(in, sec, list)
		if err != nil {
			return Selection[E]{}, err
		}
		for c := kspace.Coll(0); c < kspace.NumColls; c++ {
			if targets(c) {
				s.deny[c] = deny
			}
		}
	}
	return s, nil
}

// parseList parses one comma-separated list, with an optional leading '^',
// into the mask of denied elements.
func parseList(in *elemInfo, sec, list string) (uint32, error) {
	list = strings.TrimSpace(list)
	invert := strings.HasPrefix(list, "^")
	if invert {
		list = list[1:]
	}
	var named uint32
	n := 0
	for tok := range strings.SplitSeq(list, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		b, ok := in.lookup(tok)
		if !ok {
			return 0, fmt.Errorf("%w: unknown %s %q; valid: %s", ErrSelection, in.kind, tok, in.valid())
		}
		named |= b
		n++
	}
	if invert {
		return named, nil
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: section %q names no %s (use \"^\" alone to allow all)", ErrSelection, sec, in.kind)
	}
	return in.all() &^ named, nil
}

// Allows reports whether coll may use e.
func (s Selection[E]) Allows(coll kspace.Coll, e E) bool {
	if coll < 0 || coll >= kspace.NumColls || e < 0 || int(e) >= infoOf[E]().n {
		return false
	}
	return s.deny[coll]&(1<<uint(e)) == 0
}

// Allowed lists, in value order, what coll may use.
func (s Selection[E]) Allowed(coll kspace.Coll) []E {
	var out []E
	for i := 0; i < infoOf[E]().n; i++ {
		if s.Allows(coll, E(i)) {
			out = append(out, E(i))
		}
	}
	return out
}

// IsSet reports whether the selection came from a non-empty value.
func (s Selection[E]) IsSet() bool { return s.set }

// String returns the value the selection was parsed from ("" when unset).
func (s Selection[E]) String() string { return s.spec }

// Describe names the selection for messages: `NCCL_ALGO="tree"`, or
// `NCCL_ALGO unset`.
func (s Selection[E]) Describe() string {
	env := infoOf[E]().env
	if !s.set {
		return env + " unset"
	}
	return fmt.Sprintf("%s=%q", env, s.spec)
}

// MarshalText returns the value the selection was parsed from.
func (s Selection[E]) MarshalText() ([]byte, error) { return []byte(s.spec), nil }

// UnmarshalText parses a value in NCCL's grammar, so that a Selection can
// serve as a flag.TextVar.
func (s *Selection[E]) UnmarshalText(b []byte) error {
	v, err := parseSelection[E](string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
