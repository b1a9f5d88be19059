package kspace

import (
	"fmt"
	"strings"
)

func lookup[T ~int](kind, word string, names []string) (T, error) {
	for i, n := range names {
		if strings.EqualFold(n, word) {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q: valid %ss are %s", kind, word, kind, strings.Join(names, ", "))
}

// ParseColl parses a collective name, case-insensitively.
func ParseColl(s string) (Coll, error) { return lookup[Coll]("collective", s, CollNames()) }

// ParseRedOp parses a device reduction op name, case-insensitively.
func ParseRedOp(s string) (RedOp, error) { return lookup[RedOp]("reduction op", s, RedOpNames()) }

// ParseType parses a data type name ("f32"), case-insensitively.
func ParseType(s string) (Type, error) { return lookup[Type]("type", s, TypeNames()) }

// ParseAlgo parses an algorithm name ("RING"), case-insensitively.
func ParseAlgo(s string) (Algo, error) { return lookup[Algo]("algorithm", s, AlgoNames()) }

// ParseProto parses a protocol name ("LL128"), case-insensitively.
func ParseProto(s string) (Proto, error) { return lookup[Proto]("protocol", s, ProtoNames()) }

// ParseFunc parses a function's words: "SendRecv", "AllGather RING LL" or
// "AllReduce Sum f32 RING LL". Unknown names are errors listing the valid
// ones; an algorithm the collective lacks is an error listing its algorithms.
func ParseFunc(s string) (Func, error) {
	w := strings.Fields(s)
	if len(w) == 0 {
		return Func{}, fmt.Errorf("empty function: want \"Coll [RedOp Type] Algo Proto\"")
	}
	c, err := ParseColl(w[0])
	if err != nil {
		return Func{}, err
	}
	f := Func{Coll: c, RedOp: Unset, Type: Unset, Algo: Unset, Proto: Unset}
	want := 3
	form := c.String() + " Algo Proto"
	switch {
	case c == SendRecv:
		want, form = 1, "SendRecv"
	case c.HasRedOp():
		want, form = 5, c.String()+" RedOp Type Algo Proto"
	}
	if len(w) != want {
		return Func{}, fmt.Errorf("function %q: %s takes %d words, like %q", s, c, want, form)
	}
	if c == SendRecv {
		return f, nil
	}
	rest := w[1:]
	if c.HasRedOp() {
		if f.RedOp, err = ParseRedOp(rest[0]); err != nil {
			return Func{}, err
		}
		if f.Type, err = ParseType(rest[1]); err != nil {
			return Func{}, err
		}
		rest = rest[2:]
	}
	if f.Algo, err = ParseAlgo(rest[0]); err != nil {
		return Func{}, err
	}
	if AlgoIndex(c, f.Algo) < 0 {
		var names []string
		for _, a := range AlgosOf[c] {
			names = append(names, a.String())
		}
		return Func{}, fmt.Errorf("%s has no algorithm %s: its algorithms are %s", c, f.Algo, strings.Join(names, ", "))
	}
	if f.Proto, err = ParseProto(rest[1]); err != nil {
		return Func{}, err
	}
	return f, nil
}
