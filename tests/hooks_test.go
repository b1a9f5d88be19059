package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommitMsgHook: .githooks/commit-msg takes `area: what changed`
// subjects of at most 72 characters (and merges), and refuses the rest.
func TestCommitMsgHook(t *testing.T) {
	hook, err := filepath.Abs("../.githooks/commit-msg")
	require.NoError(t, err)
	cases := []struct {
		msg string
		ok  bool
	}{
		{"runtime/comm: lanes for default streams\n\nThe why.\n", true},
		{"# a comment first\nmake: hooks\n", true},
		{"Merge branch 'x' into main\n", true},
		{"capi: " + strings.Repeat("x", 67) + "\n", false},
		{"no area here\n", false},
	}
	for _, c := range cases {
		f := filepath.Join(t.TempDir(), "msg")
		require.NoError(t, os.WriteFile(f, []byte(c.msg), 0o644))
		out, err := exec.Command("sh", hook, f).CombinedOutput()
		if c.ok {
			assert.NoError(t, err, "%q: %s", c.msg, out)
		} else {
			assert.Error(t, err, "%q should be refused", c.msg)
		}
	}
}
