// Package envint reads a whole-number setting from an environment
// variable: the parse and range check that the runtime's integer knobs
// (NCCLGO_NET_*, NCCL_SOCKET_NTHREADS, NCCL_NCHANNELS_PER_PEER, ...)
// share, so that each reports a bad value in the same words.
package envint

import (
	"fmt"
	"strconv"
	"strings"
)

// Get reads the variable name through getenv (os.Getenv, or a test's
// lookup). A variable that is unset or blank gives ok false and no error.
// Otherwise its value, surrounding white space trimmed, must be a decimal
// integer (strconv.Atoi's syntax) from min to max; anything else is an
// error `NAME="value": want <what> from <min> to <max>`, what naming the
// value ("an integer", "microseconds"), which the caller prefixes with its
// package and may follow with the default.
func Get(getenv func(string) string, name, what string, min, max int) (n int, ok bool, err error) {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < min || n > max {
		return 0, false, fmt.Errorf("%s=%q: want %s from %d to %d", name, s, what, min, max)
	}
	return n, true, nil
}
