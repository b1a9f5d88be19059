// Package cli is the command-line convention of ncclgo's commands
// (ncclgen, ncclperf), on github.com/spf13/pflag:
//
//   - Flags are GNU-style: --name value, --name=value, and one-letter
//     shorthands (-n value, -n5). A multi-letter flag written with one
//     dash (-only, -coll=all) is read as its long form, so Go-style
//     command lines, scripts and go:generate lines keep working.
//   - -h, --help (and ncclgen's "help COMMAND") print the usage on standard
//     output and exit 0.
//   - A usage error (an unknown flag, a bad value, a wrong argument) is
//     printed with the command's name on standard error and exits 2, as Go
//     tools do. Any other failure exits 1.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// Exit statuses.
const (
	ExitOK      = 0 // success, or the usage asked for
	ExitFailure = 1 // the work failed
	ExitUsage   = 2 // the command line is wrong
)

// ErrHelp is what Parse returns for -h or --help: the caller prints its
// usage on standard output and exits 0.
var ErrHelp = pflag.ErrHelp

// UsageError is an error in what the command line says.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err (when not nil) as a usage error.
func Usage(err error) error {
	var ue *UsageError
	if err == nil || errors.Is(err, ErrHelp) || errors.As(err, &ue) {
		return err
	}
	return &UsageError{Err: err}
}

// Usagef is a new usage error.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// IsUsage reports whether err is a usage error.
func IsUsage(err error) bool {
	var ue *UsageError
	return errors.As(err, &ue)
}

// ExitCode is the exit status for the outcome err of a command.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return ExitOK
	case IsUsage(err):
		return ExitUsage
	}
	return ExitFailure
}

// NewFlagSet returns a flag set for the command name that prints nothing
// itself: Parse hands help requests and errors to the caller. Flags are
// listed in the order they are defined.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses args with fs after LongFlags: it returns ErrHelp for -h or
// --help, and a *UsageError for anything wrong with the flags.
func Parse(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(LongFlags(fs, args))
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return err
	}
	return &UsageError{Err: err}
}

// LongFlags rewrites each multi-letter flag of fs written with one dash
// (-only X, -out=dir, -help) to its long form (--only X). Arguments after
// "--" are left alone, and so is anything else, such as a shorthand with
// its value attached (-b8).
func LongFlags(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && (name == "help" || fs.Lookup(name) != nil) {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
