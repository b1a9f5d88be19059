package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLongFlags(t *testing.T) {
	fs := NewFlagSet("t")
	fs.String("only", "", "")
	fs.StringP("minbytes", "b", "", "")
	fs.Bool("ncclgo", true, "")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"-only", "x"}, []string{"--only", "x"}},
		{[]string{"-only=x", "-ncclgo=false"}, []string{"--only=x", "--ncclgo=false"}},
		{[]string{"-b8", "-b", "8", "--only", "x"}, []string{"-b8", "-b", "8", "--only", "x"}},
		{[]string{"-minbytes", "8"}, []string{"--minbytes", "8"}},
		{[]string{"-help"}, []string{"--help"}},
		{[]string{"-zz"}, []string{"-zz"}},
		{[]string{"pos", "-only", "x"}, []string{"pos", "--only", "x"}},
		{[]string{"--", "-only"}, []string{"--", "-only"}},
	} {
		assert.Equal(t, tc.want, LongFlags(fs, tc.in), "%q", tc.in)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-only", "x", "-b8"}, ExitOK},
		{[]string{"-h"}, ExitOK},
		{[]string{"--help"}, ExitOK},
		{[]string{"-help"}, ExitOK},
		{[]string{"--nope"}, ExitUsage},
		{[]string{"-zz"}, ExitUsage},
		{[]string{"--count", "x"}, ExitUsage},
		{[]string{"--only"}, ExitUsage},
	} {
		fs := NewFlagSet("t")
		fs.String("only", "", "")
		fs.StringP("minbytes", "b", "", "")
		fs.Int("count", 0, "")
		err := Parse(fs, tc.args)
		assert.Equal(t, tc.code, ExitCode(err), "%q: %v", tc.args, err)
	}
}

func TestExitCode(t *testing.T) {
	assert.Equal(t, ExitOK, ExitCode(nil))
	assert.Equal(t, ExitOK, ExitCode(fmt.Errorf("x: %w", ErrHelp)))
	assert.Equal(t, ExitFailure, ExitCode(errors.New("disk full")))
	assert.Equal(t, ExitUsage, ExitCode(Usagef("--arch %q: no", "x")))
	assert.Equal(t, ExitUsage, ExitCode(fmt.Errorf("build: %w", Usage(errors.New("bad")))))
	base := errors.New("bad")
	require.ErrorIs(t, Usage(base), base)
	assert.Nil(t, Usage(nil))
	assert.Equal(t, ExitOK, ExitCode(Usage(ErrHelp)), "help stays help")
}
