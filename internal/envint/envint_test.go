package envint

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/stretchr/testify/assert"
)

func TestGet(t *testing.T) {
	for _, c := range []struct {
		val     string
		n       int
		ok      bool
		wantErr string
	}{
		{"", 0, false, ""},
		{"   ", 0, false, ""},
		{"1", 1, true, ""},
		{" 16 ", 16, true, ""},
		{"+3", 3, true, ""},
		{"0", 0, false, `N="0": want a count from 1 to 16`},
		{"17", 0, false, `N="17": want a count from 1 to 16`},
		{"-1", 0, false, `N="-1": want a count from 1 to 16`},
		{"2x", 0, false, `N="2x": want a count from 1 to 16`},
		{"0x10", 0, false, `N="0x10": want a count from 1 to 16`},
		{" 99999999999999999999 ", 0, false, `N="99999999999999999999": want a count from 1 to 16`},
	} {
		n, ok, err := Get(envmap.Getenv("N", c.val), "N", "a count", 1, 16)
		assert.Equal(t, c.n, n, "%q", c.val)
		assert.Equal(t, c.ok, ok, "%q", c.val)
		if c.wantErr == "" {
			assert.NoError(t, err, "%q", c.val)
		} else {
			assert.EqualError(t, err, c.wantErr, "%q", c.val)
		}
	}
	// Another variable is not read.
	_, ok, err := Get(envmap.Getenv("M", "5"), "N", "a count", 1, 16)
	assert.False(t, ok)
	assert.NoError(t, err)
}
