package kspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFilterMatch(t *testing.T) {
	ar := Func{Coll: AllReduce, RedOp: Sum, Type: F32, Algo: Ring, Proto: LL128}
	ag := Func{Coll: AllGather, RedOp: Unset, Type: Unset, Algo: Ring, Proto: LL}
	cases := []struct {
		pattern string
		fn      Func
		want    bool
	}{
		{"", ar, true},
		{"AllReduce Sum f32 RING LL128", ar, true},
		{"allreduce sum F32 ring ll128", ar, true},
		{"AllReduce * * * *", ar, true},
		{"AllReduce * f* RING *", ar, true},
		{"AllReduce", ar, false}, // matched whole, not as a prefix
		{"AllReduce Sum f32 RING LL", ar, false},
		{"(AllGather|Broadcast) * *", ag, true},
		{"(AllGather|Broadcast) * *", ar, false},
		{"AllReduce (Sum|Prod) (f32|f64) RING (LL|LL128)", ar, true},
		{"SendRecv", SendRecvFunc, true},
		{"SendRecv|AllGather * *", ag, true},
	}
	for _, c := range cases {
		f, err := ParseFilter(c.pattern)
		require.NoError(t, err, c.pattern)
		assert.Equal(t, c.want, f.Match(c.fn), "%q on %q", c.pattern, c.fn)
	}
}

func TestFilterErrors(t *testing.T) {
	cases := []struct {
		pattern string
		pos     int
		msg     string
	}{
		{"(AllReduce", 0, "never closed"},
		{"AllReduce)", 9, "without a matching"},
		{"AllReduce||SendRecv", 10, "empty alternative"},
		{"AllReduce|", 9, "empty alternative at the end"},
		{"()", 1, "empty group"},
		{"AllReduce Sum f32 RING LL.", 25, "unexpected character"},
		{"All[Reduce]", 3, "unexpected character"},
	}
	for _, c := range cases {
		_, err := ParseFilter(c.pattern)
		var fe *FilterError
		require.True(t, errors.As(err, &fe), "%q: %v", c.pattern, err)
		assert.Equal(t, c.pos, fe.Pos, c.pattern)
		assert.Contains(t, fe.Error(), c.msg, c.pattern)
		// The caret line points at the offending byte.
		lines := strings.Split(fe.Error(), "\n")
		require.Len(t, lines, 3)
		assert.Equal(t, "  "+strings.Repeat(" ", c.pos)+"^", lines[2])
	}
}

func TestFilterSelectingNothing(t *testing.T) {
	_, err := NewSpace(MustParseFilter("AllReduce Sum f32 RING NOPE"))
	require.ErrorIs(t, err, ErrEmptyFilter)
	assert.Contains(t, err.Error(), "AllReduce Sum f32 RING NOPE")
}

// FuzzParseFilter checks that the parser never panics, that what it accepts
// compiles and matches deterministically, and that errors point inside the
// pattern.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"", "SendRecv", "AllGather * *|Broadcast * *|SendRecv", "AllReduce Sum f32 * *",
		"AllReduce MinMax i32 NVLS *", "AllReduce Sum f32 RING LL128", "(a|(b c))*", "((", "|", "a)", "x y z"} {
		f.Add(s)
	}
	fns := Rows()
	f.Fuzz(func(t *testing.T, pattern string) {
		flt, err := ParseFilter(pattern)
		if err != nil {
			var fe *FilterError
			if !errors.As(err, &fe) {
				t.Fatalf("%q: error of type %T: %v", pattern, err, err)
			}
			if fe.Pos < 0 || fe.Pos > len(pattern) {
				t.Fatalf("%q: position %d outside the pattern", pattern, fe.Pos)
			}
			return
		}
		for _, fn := range fns[:50] {
			if first, again := flt.Match(fn), flt.Match(fn); first != again {
				t.Fatal("non-deterministic match")
			}
		}
	})
}
