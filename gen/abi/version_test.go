package abi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestVersionDerivesFromTheDeclaration(t *testing.T) {
	v := Version()
	assert.Len(t, v, 16)
	assert.Equal(t, v, Version(), "deterministic")
	assert.NotEqual(t, v, Version(Const{Name: "NG_X", Value: 1}), "constants count")

	// A changed field changes the version.
	saved := DevWork.Fields[0]
	t.Cleanup(func() { DevWork.Fields[0] = saved })
	f := saved
	f.Name += "Renamed"
	DevWork.Fields[0] = f
	assert.NotEqual(t, v, Version())
	DevWork.Fields[0] = saved
	assert.Equal(t, v, Version())
}
