package topo

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/runtime/residency"
)

type fakeSMs struct {
	dev, ctx       int
	devErr, ctxErr error
}

func (f fakeSMs) DeviceSMs() (int, error)  { return f.dev, f.devErr }
func (f fakeSMs) ContextSMs() (int, error) { return f.ctx, f.ctxErr }

func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestSMShareOf(t *testing.T) {
	unsupported := errors.New("CUDA_ERROR_NOT_SUPPORTED")
	half := envOf(map[string]string{residency.EnvMPSPercent: "50"})
	cases := []struct {
		name string
		q    fakeSMs
		mps  bool
		env  func(string) string
		want SMShare
	}{
		{"whole GPU", fakeSMs{dev: 132, ctx: 132}, false, envOf(nil), SMShare{SMs: 132, DeviceSMs: 132, ContextSMs: 132}},
		{"no exec affinity", fakeSMs{dev: 132, ctxErr: unsupported}, false, envOf(nil), SMShare{SMs: 132, DeviceSMs: 132}},
		// The driver reports the share: it is not halved again.
		{"MPS 50 %, attribute limited", fakeSMs{dev: 66, ctx: 66}, true, half, SMShare{SMs: 66, DeviceSMs: 66, ContextSMs: 66, Percent: 50, MPS: true}},
		{"MPS 50 %, only the affinity limited", fakeSMs{dev: 132, ctx: 66}, true, half, SMShare{SMs: 66, DeviceSMs: 132, ContextSMs: 66, Percent: 50, MPS: true}},
		{"MPS, daemon-set share only", fakeSMs{dev: 33, ctx: 33}, true, envOf(nil), SMShare{SMs: 33, DeviceSMs: 33, ContextSMs: 33, MPS: true}},
		{"percentage without MPS means nothing", fakeSMs{dev: 132, ctx: 132}, false, half, SMShare{SMs: 132, DeviceSMs: 132, ContextSMs: 132}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := SMShareOf(c.q, c.mps, c.env)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.mps && c.want.Percent > 0, got.Own())
			assert.Contains(t, got.String(), "SMs")
		})
	}

	_, err := SMShareOf(fakeSMs{dev: 132}, true, envOf(map[string]string{residency.EnvMPSPercent: "150"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), residency.EnvMPSPercent)
	assert.Contains(t, err.Error(), "150")
	_, err = SMShareOf(fakeSMs{devErr: unsupported}, false, envOf(nil))
	assert.ErrorIs(t, err, unsupported)
	_, err = SMShareOf(fakeSMs{dev: 0}, false, envOf(nil))
	assert.Error(t, err)
}
