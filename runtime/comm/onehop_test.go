package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimpleOneHopFromEnv(t *testing.T) {
	for _, c := range []struct {
		v     string
		set   bool
		nodes int
		want  bool
	}{{"", false, 1, false}, {"", false, 2, true}, {"auto", true, 3, true}, {"auto", true, 1, false},
		{"1", true, 1, true}, {"0", true, 2, false}} {
		got, err := simpleOneHopFromEnv(func(string) (string, bool) { return c.v, c.set }, c.nodes)
		require.NoError(t, err, "%q", c.v)
		assert.Equal(t, c.want, got, "%q with %d nodes", c.v, c.nodes)
	}
	for _, v := range []string{"yes", "2", "on"} {
		_, err := simpleOneHopFromEnv(func(string) (string, bool) { return v, true }, 2)
		require.Error(t, err, "%q", v)
		assert.Contains(t, err.Error(), EnvSimpleOneHop)
		assert.Contains(t, err.Error(), "want auto")
	}
}
