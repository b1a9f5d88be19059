package numfmt

import (
	"math"
	"testing"

	"github.com/ncclgo/ncclgo/kspace"

	"github.com/stretchr/testify/assert"
)

func TestRoundTrip(t *testing.T) {
	vals := []float64{0, 1, 2, 3, 6, 8, 0.5, 96, -2}
	for tt := kspace.Type(0); tt < kspace.NumTypes; tt++ {
		got := Decode(tt, Encode(tt, vals))
		for i, v := range vals {
			if v < 0 && tt.IsInteger() && !tt.IsSigned() || tt.IsInteger() && v != float64(int64(v)) {
				continue
			}
			assert.InDelta(t, v, got[i], 1e-9, "%s %v", tt, v)
		}
	}
}

func TestKnownEncodings(t *testing.T) {
	assert.Equal(t, []byte{0x00, 0x3c}, Encode(kspace.F16, []float64{1}))
	assert.Equal(t, []byte{0x80, 0x3f}, Encode(kspace.BF16, []float64{1}))
	assert.Equal(t, []byte{0x38}, Encode(kspace.F8E4M3, []float64{1}))
	assert.Equal(t, []byte{0x3c}, Encode(kspace.F8E5M2, []float64{1}))
	assert.Equal(t, 448.0, Round(kspace.F8E4M3, 1e6))   // saturates at e4m3's largest finite value
	assert.Equal(t, 57344.0, Round(kspace.F8E5M2, 1e6)) // so does e5m2 (the device's __NV_SATFINITE)
	assert.Equal(t, 1.0+1.0/8, Round(kspace.F8E4M3, 1.1))
}

func TestFloat32Rounding(t *testing.T) {
	// Go's float64 -> float32 conversion: ties to even, overflow to Inf.
	assert.Equal(t, 1.0, Round(kspace.F32, 1+0x1p-24))
	assert.Equal(t, 1+0x1p-22, Round(kspace.F32, 1+3*0x1p-24))
	assert.Equal(t, float64(math.MaxFloat32), Round(kspace.F32, math.MaxFloat32+0x1p102))
	assert.Equal(t, math.Inf(1), Round(kspace.F32, math.MaxFloat32+0x1p103)) // max + half ulp: the even neighbour is Inf
	assert.Equal(t, math.Inf(-1), Round(kspace.F32, -1e39))
	assert.Equal(t, 0x1p-149, Round(kspace.F32, 0x1.8p-150)) // 0.75 of the smallest subnormal: nearest
	assert.Equal(t, 0.0, Round(kspace.F32, 0x1p-150))        // half the smallest subnormal ties to 0
	assert.Equal(t, 0x1p-148, Round(kspace.F32, 3*0x1p-150)) // 1.5 subnormals tie to 2
}
