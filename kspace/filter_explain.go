package kspace

import (
	"fmt"
	"strings"
)

// WhyEmpty explains why a filter selects no valid function, for the error
// that reports it: per alternative of the pattern, a collective it does
// not know, the wrong number of fields for its collective, or a name
// (reduction op, type, algorithm, protocol) that is not valid in its
// position, listing the valid ones. Patterns it cannot take apart (groups
// spanning several fields, partial-word globs) get a general hint.
func (f Filter) WhyEmpty() string {
	alts := splitTop(f.pattern, '|')
	var out []string
	for _, a := range alts {
		why := explainAlt(strings.TrimSpace(a))
		if len(alts) > 1 {
			why = fmt.Sprintf("%q: %s", strings.TrimSpace(a), why)
		}
		out = append(out, why)
	}
	return strings.Join(out, "; ")
}

// splitTop splits s at sep outside parentheses, and strips one pair of
// parentheses around the whole of s.
func splitTop(s string, sep byte) []string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") && closing(s, 0) == len(s)-1 {
		s = s[1 : len(s)-1]
	}
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// closing returns the index of the ')' that closes the '(' at i.
func closing(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

const emptyHint = "it matches no valid function (`ncclgen list` prints them all)"

// explainAlt explains one alternative without '|' at its top level.
func explainAlt(alt string) string {
	words := strings.Fields(splitTop(alt, 0)[0])
	for _, w := range words {
		if strings.Contains(w, "(") && strings.ContainsAny(w[strings.Index(w, "("):], " ") {
			return emptyHint
		}
	}
	if len(words) == 0 {
		return emptyHint
	}
	// The collective decides the fields.
	colls, ok := literals(words[0])
	if !ok {
		return emptyHint
	}
	var whys []string
	for _, c := range colls {
		coll, err := ParseColl(c)
		if err != nil {
			whys = append(whys, err.Error())
			continue
		}
		if why := explainFields(coll, words[1:]); why != "" {
			whys = append(whys, why)
		}
	}
	if len(whys) == 0 {
		return emptyHint + ": every combination it names is invalid (`ncclgen explain` says why for one)"
	}
	return strings.Join(whys, "; ")
}

// explainFields checks the fields after collective c.
func explainFields(c Coll, rest []string) string {
	form := c.String() + " Algo Proto"
	switch {
	case c == SendRecv:
		form = "SendRecv"
	case c.HasRedOp():
		form = c.String() + " RedOp Type Algo Proto"
	}
	want := len(strings.Fields(form)) - 1
	if len(rest) != want {
		fields := "fields"
		if want == 0 {
			fields = "field"
		}
		return fmt.Sprintf("%s needs %d %s (%q), the pattern has %d", c, want+1, fields, form, len(rest)+1)
	}
	kinds := []func(string) error{
		func(s string) error {
			a, err := ParseAlgo(s)
			if err == nil && AlgoIndex(c, a) < 0 {
				var names []string
				for _, a := range AlgosOf[c] {
					names = append(names, a.String())
				}
				err = fmt.Errorf("%s has no algorithm %s: its algorithms are %s", c, a, strings.Join(names, ", "))
			}
			return err
		},
		func(s string) error { _, err := ParseProto(s); return err },
	}
	if c.HasRedOp() {
		kinds = append([]func(string) error{
			func(s string) error { _, err := ParseRedOp(s); return err },
			func(s string) error { _, err := ParseType(s); return err },
		}, kinds...)
	}
	var whys []string
	for i, w := range rest {
		names, ok := literals(w)
		if !ok {
			continue
		}
		bad := 0
		var first error
		for _, n := range names {
			if err := kinds[i](n); err != nil {
				bad++
				if first == nil {
					first = err
				}
			}
		}
		if bad == len(names) {
			whys = append(whys, first.Error())
		}
	}
	if len(whys) == 0 {
		return ""
	}
	return strings.Join(whys, "; ")
}

// literals returns the names a word stands for: itself, or the
// alternatives of a group of plain names; ok is false for globs.
func literals(w string) ([]string, bool) {
	if strings.Contains(w, "*") {
		return nil, false
	}
	if strings.HasPrefix(w, "(") && strings.HasSuffix(w, ")") {
		parts := splitTop(w, '|')
		for _, p := range parts {
			if strings.ContainsAny(p, "()") {
				return nil, false
			}
		}
		return parts, true
	}
	if strings.ContainsAny(w, "()|") {
		return nil, false
	}
	return []string{w}, true
}
