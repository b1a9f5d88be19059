package numfmt

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoundTrip(t *testing.T) {
	vals := []float64{0, 1, 2, 3, 6, 8, 0.5, 96, -2}
	for tt := Int8; tt < NumTypes; tt++ {
		got := Decode(tt, Encode(tt, vals))
		for i, v := range vals {
			if v < 0 && (tt == Uint8 || tt == Uint32 || tt == Uint64) || !tt.IsFloat() && v != float64(int64(v)) {
				continue
			}
			assert.InDelta(t, v, got[i], 1e-9, "%s %v", tt, v)
		}
	}
}

func TestKnownEncodings(t *testing.T) {
	assert.Equal(t, []byte{0x00, 0x3c}, Encode(Float16, []float64{1}))
	assert.Equal(t, []byte{0x80, 0x3f}, Encode(Bfloat16, []float64{1}))
	assert.Equal(t, []byte{0x38}, Encode(Float8e4m3, []float64{1}))
	assert.Equal(t, []byte{0x3c}, Encode(Float8e5m2, []float64{1}))
	assert.Equal(t, 448.0, Round(Float8e4m3, 1e6)) // saturates at e4m3's largest finite value
	assert.Equal(t, 57344.0, Round(Float8e5m2, 1e6))
	assert.Equal(t, 1.0+1.0/8, Round(Float8e4m3, 1.1))
}
