package proxy

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/internal/envmap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyFromEnv(t *testing.T) {
	env := envmap.Getenv
	p, err := PolicyFromEnv(env())
	require.NoError(t, err)
	assert.Equal(t, Policy{Spin: SpinIdle, Nap: NapIdle}, p)
	p, err = PolicyFromEnv(env("NCCLGO_NET_PROXY_SPIN_US", "0", "NCCLGO_NET_PROXY_NAP_US", "5"))
	require.NoError(t, err)
	assert.Equal(t, Policy{Spin: 0, Nap: 5 * time.Microsecond}, p)
	for _, c := range []struct{ name, val, want string }{
		{"NCCLGO_NET_PROXY_SPIN_US", "-1", "from 0 to 1000000 (default 200)"},
		{"NCCLGO_NET_PROXY_SPIN_US", "200us", "from 0 to 1000000 (default 200)"},
		{"NCCLGO_NET_PROXY_NAP_US", "0", "from 1 to 1000 (default 20)"},
		{"NCCLGO_NET_PROXY_NAP_US", "1001", "from 1 to 1000 (default 20)"},
	} {
		_, err := PolicyFromEnv(env(c.name, c.val))
		require.ErrorContains(t, err, fmt.Sprintf("%s=%q: want microseconds %s", c.name, c.val, c.want))
	}
}

// busyOnce is busy on its first pass only and counts its passes.
type busyOnce struct{ n atomic.Int64 }

func (c *busyOnce) Progress() (bool, error) { return c.n.Add(1) == 1, nil }

// An engine runs with its policy: after the one busy pass, the default
// spins 200 µs and then naps 20 µs at a time (hundreds of passes in
// 15 ms), while a policy without a spin and with 1 ms naps makes about
// one pass per millisecond.
func TestEngineFollowsItsPolicy(t *testing.T) {
	passes := func(p Policy) int64 {
		e := NewWithPolicy(p)
		defer e.Release()
		c := &busyOnce{}
		require.NoError(t, e.Add(context.Background(), 1, c, nil))
		time.Sleep(15 * time.Millisecond)
		require.NoError(t, e.Detach(1))
		return c.n.Load()
	}
	spun := passes(DefaultPolicy)
	napped := passes(Policy{Spin: 0, Nap: time.Millisecond})
	t.Logf("passes in 15 ms: default %d, no spin with 1 ms naps %d", spun, napped)
	assert.Greater(t, spun, 5*napped)
	assert.Less(t, napped, int64(40))
}
