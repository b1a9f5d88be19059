package transport

import (
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNETKnobsFromEnv(t *testing.T) {
	env := envmap.Getenv
	k, err := netKnobsFromEnv(env())
	require.NoError(t, err)
	assert.Equal(t, netKnobs{recvAhead: 8, sendPairs: 16, creditBatch: 4}, k, "the defaults")
	k, err = netKnobsFromEnv(env("NCCLGO_NET_RECV_AHEAD", "16", "NCCLGO_NET_SEND_PAIRS", " 2 ", "NCCLGO_NET_CREDIT_BATCH", "1"))
	require.NoError(t, err)
	assert.Equal(t, netKnobs{recvAhead: 16, sendPairs: 2, creditBatch: 1}, k)
	for _, c := range []struct{ name, val, want string }{
		{"NCCLGO_NET_RECV_AHEAD", "0", "from 1 to 16 (default 8)"},
		{"NCCLGO_NET_RECV_AHEAD", "17", "from 1 to 16 (default 8)"},
		{"NCCLGO_NET_SEND_PAIRS", "x", "from 1 to 16 (default 16)"},
		{"NCCLGO_NET_CREDIT_BATCH", "9", "from 1 to 8 (default 4)"},
	} {
		_, err := netKnobsFromEnv(env(c.name, c.val))
		require.ErrorContains(t, err, fmt.Sprintf("%s=%q: want an integer %s", c.name, c.val, c.want))
	}
}

// The pipeline settings change how much is in flight, never what arrives:
// steps of every protocol move intact at the extremes of each range.
func TestNETMovesStepsWithKnobs(t *testing.T) {
	for _, k := range []netKnobs{
		{recvAhead: 1, sendPairs: 1, creditBatch: 1},
		{recvAhead: 16, sendPairs: 16, creditBatch: 8},
		{recvAhead: 3, sendPairs: 5, creditBatch: 2},
	} {
		t.Run(fmt.Sprintf("ahead%d_pairs%d_batch%d", k.recvAhead, k.sendPairs, k.creditBatch), func(t *testing.T) {
			netTestKnobs = &k
			t.Cleanup(func() { netTestKnobs = nil })
			moveSteps(t, loNet(t, 2, 1), 2, 3)
		})
	}
}
