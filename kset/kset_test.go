package kset

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() *Manifest {
	return &Manifest{
		Format: FormatVersion, ABI: "0123456789abcdef", Filter: "AllReduce Sum f32 * *",
		Arches: []string{"sm_90", "sm_100"}, FuncTable: "ngDevFuncTable",
		Funcs: []Func{
			{Name: "AllReduce Sum f32 RING LL", Kernel: 0, Specialized: true, Implemented: true},
			{Name: "AllReduce Sum f32 RING SIMPLE", Kernel: 1, Implemented: true},
			{Name: "Nop", Kernel: 1},
		},
		Kernels: []Kernel{{Name: "AllReduce Sum f32 RING LL", Symbol: "ngDevKernel_AllReduce_Sum_f32_RING_LL"}, {Name: "Generic", Symbol: "ngDevKernel_Generic"}},
		Aliases: map[string]int{},
	}
}

func TestRoundTrip(t *testing.T) {
	m := sample()
	img := []byte("\x50\xed\x55\xba fake fatbin")
	b, err := Wrap(m, img)
	require.NoError(t, err)
	assert.True(t, IsSet(b))
	got, gotImg, err := Split(b)
	require.NoError(t, err)
	assert.Equal(t, m, got)
	assert.Equal(t, img, gotImg)
	assert.Zero(t, (len(b)-len(img))%imageAlign, "the image starts aligned")

	js, err := m.Encode()
	require.NoError(t, err)
	got, err = Decode(js)
	require.NoError(t, err)
	assert.Equal(t, m, got)
}

func TestSplitRejects(t *testing.T) {
	_, _, err := Split([]byte("\x50\xed\x55\xba bare fatbin"))
	assert.ErrorIs(t, err, ErrNoManifest)

	b, err := Wrap(sample(), []byte("img"))
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"short":     b[:12],
		"truncated": b[:40],
		"garbage":   append(append([]byte(nil), b[:16]...), make([]byte, len(b)-16)...),
	} {
		_, _, err := Split(bad)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}

	for name, mut := range map[string]func(*Manifest){
		"format":    func(m *Manifest) { m.Format = 9 },
		"abi":       func(m *Manifest) { m.ABI = "" },
		"kernel":    func(m *Manifest) { m.Funcs[0].Kernel = 7 },
		"alias":     func(m *Manifest) { m.Aliases["AllReduce Sum i32 RING LL"] = 3 },
		"no funcs":  func(m *Manifest) { m.Funcs = nil },
		"no symbol": func(m *Manifest) { m.Kernels[0].Symbol = "" },
	} {
		m := sample()
		mut(m)
		assert.ErrorIs(t, m.Validate(), ErrCorrupt, name)
		_, err := Wrap(m, []byte("img"))
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
	_, err = Decode([]byte(`{"format":1,"bogus":2}`))
	assert.ErrorIs(t, err, ErrCorrupt)
}
