package kspace

import (
	"fmt"
	"regexp"
	"strings"
)

// Filter selects the functions of a slim build. Its grammar is that of
// NCCL's ONLY_FUNCS: a pattern matched, whole and case-insensitively, against
// a function's words ("AllReduce Sum f32 RING LL"; fields that do not apply
// are left out), where `*` matches any run of non-space characters (so a
// whole word, or the rest of one as in `f*`), `a|b` alternates, and
// parentheses group. The zero Filter and the empty pattern select everything.
type Filter struct {
	pattern string
	re      *regexp.Regexp
}

// FilterError reports a malformed filter and the position (0-based, in
// bytes) of the offending character.
type FilterError struct {
	Pattern string
	Pos     int
	Msg     string
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("filter %q: %s at position %d\n  %s\n  %s^", e.Pattern, e.Msg, e.Pos, e.Pattern, strings.Repeat(" ", e.Pos))
}

// MaxFilterLen is the longest pattern ParseFilter accepts, in bytes:
// every useful filter is far shorter, and matching a huge pattern against
// every row takes minutes.
const MaxFilterLen = 4096

// ParseFilter parses a filter pattern. The empty pattern selects every
// function.
func ParseFilter(pattern string) (Filter, error) {
	if len(pattern) > MaxFilterLen {
		return Filter{}, fmt.Errorf("filter of %d bytes (starting %q): patterns are limited to %d bytes", len(pattern), pattern[:32], MaxFilterLen)
	}
	if strings.TrimSpace(pattern) == "" {
		return Filter{}, nil
	}
	var b strings.Builder
	b.WriteString("(?i)^(?:")
	var open []int // positions of unclosed '('
	empty := true  // current alternative has no content yet
	lastSep := -1  // position of the '|' or '(' that began the alternative
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*':
			b.WriteString("[^ ]*")
			empty = false
		case c == '|':
			if empty {
				return Filter{}, &FilterError{pattern, i, "empty alternative before '|'"}
			}
			b.WriteByte('|')
			empty, lastSep = true, i
		case c == '(':
			open = append(open, i)
			b.WriteString("(?:")
			empty, lastSep = true, i
		case c == ')':
			if len(open) == 0 {
				return Filter{}, &FilterError{pattern, i, "')' without a matching '('"}
			}
			if empty {
				return Filter{}, &FilterError{pattern, i, "empty group or alternative before ')'"}
			}
			open = open[:len(open)-1]
			b.WriteByte(')')
			empty = false
		case c == ' ':
			b.WriteByte(' ')
		case c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			b.WriteByte(c)
			empty = false
		default:
			return Filter{}, &FilterError{pattern, i, fmt.Sprintf("unexpected character %q (allowed: letters, digits, '_', ' ', '*', '|', '(', ')')", c)}
		}
	}
	if len(open) > 0 {
		return Filter{}, &FilterError{pattern, open[len(open)-1], "'(' is never closed"}
	}
	if empty {
		pos := len(pattern)
		if lastSep >= 0 {
			pos = lastSep
		}
		return Filter{}, &FilterError{pattern, pos, "empty alternative at the end"}
	}
	b.WriteString(")$")
	re, err := regexp.Compile(b.String())
	if err != nil { // unreachable for patterns the checks above accept
		return Filter{}, &FilterError{pattern, 0, err.Error()}
	}
	return Filter{pattern: pattern, re: re}, nil
}

// MustParseFilter is ParseFilter for patterns known to be valid; it panics
// on error.
func MustParseFilter(pattern string) Filter {
	f, err := ParseFilter(pattern)
	if err != nil {
		panic(err)
	}
	return f
}

// String returns the pattern; the empty string selects everything.
func (f Filter) String() string { return f.pattern }

// All reports whether the filter selects every function.
func (f Filter) All() bool { return f.re == nil }

// Match reports whether the filter selects fn.
func (f Filter) Match(fn Func) bool {
	if f.re == nil {
		return true
	}
	return f.re.MatchString(fn.String())
}
