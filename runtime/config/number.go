package config

import (
	"errors"
	"strconv"
	"strings"
)

// errNotNumber is wrapped by ParseInt and parseSeconds for text that is
// not a whole number in their grammar.
var errNotNumber = errors.New("not a number")

// ParseInt reads an integer setting the way NCCL's strtoll(s, NULL, 0)
// reads its digits — decimal, 0x hexadecimal or 0-prefixed octal, with an
// optional sign and surrounding white space — but refuses anything after
// the digits instead of ignoring it: NCCL reads NCCL_NCHANNELS="1_6" as 1,
// and Go's base-0 syntax would read it as 16, so either silent reading
// would run a different job from the one the user wrote down. Every NCCL_*
// integer goes through it.
func ParseInt(s string) (int64, error) {
	t := strings.TrimSpace(s)
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 {
		return 0, errNotNumber
	}
	base, digits := 10, body
	switch {
	case len(body) > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X'):
		base, digits = 16, body[2:]
	case len(body) > 1 && body[0] == '0':
		base, digits = 8, body[1:]
	}
	if digits == "" || strings.ContainsAny(digits, "_+-") {
		return 0, errNotNumber
	}
	n, err := strconv.ParseInt(t[:len(t)-len(body)]+digits, base, 64)
	if err != nil {
		return 0, errNotNumber
	}
	return n, nil
}

// parseSeconds reads a decimal number of seconds as strtod would ("2",
// "0.5", "1e-3"), refusing what strtod would stop at (digit separators,
// trailing text) and what Go alone accepts (hexadecimal floats,
// underscores).
func parseSeconds(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" || strings.Trim(t, "0123456789.eE+-") != "" {
		return 0, errNotNumber
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, errNotNumber
	}
	return f, nil
}
