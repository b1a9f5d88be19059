package kspace

import (
	"fmt"
	"testing"
)

// Out-of-range values (Unset, as point-to-point plans carry, or a corrupt
// number) print as "Algo(-1)" instead of panicking inside fmt.
func TestStringOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{Algo(Unset), "Algo(-1)"},
		{Algo(NumAlgos), fmt.Sprintf("Algo(%d)", NumAlgos)},
		{Proto(Unset), "Proto(-1)"},
		{Proto(99), "Proto(99)"},
		{Coll(Unset), "Coll(-1)"},
		{RedOp(Unset), "RedOp(-1)"},
		{Type(Unset), "Type(-1)"},
		{Ring, "RING"},
	} {
		if got := fmt.Sprint(tc.v); got != tc.want {
			t.Errorf("fmt.Sprint(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
