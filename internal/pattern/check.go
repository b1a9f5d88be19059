package pattern

import (
	"bytes"
	"fmt"
	"strings"
)

// Guard is how many bytes the checks read on each side of an output: a
// kernel that writes one element (up to 8 bytes) before or after its
// output changes them.
const Guard = 64

// Mismatch is the error of a failed check: the elements (and guard bytes)
// that differ, a few of them spelled out.
type Mismatch struct {
	What     string
	Elems    int // elements of the output that differ
	Total    int // elements of the output
	Guard    int // guard bytes that changed
	Examples []string
}

func (m *Mismatch) Error() string {
	var parts []string
	if m.Elems > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d elements wrong", m.Elems, m.Total))
	}
	if m.Guard > 0 {
		parts = append(parts, fmt.Sprintf("%d guard bytes around the output changed (a write out of bounds)", m.Guard))
	}
	return fmt.Sprintf("%s: %s: %s", m.What, strings.Join(parts, ", "), strings.Join(m.Examples, ", "))
}

const maxExamples = 6

// Compare checks got against want byte for byte. Both hold Guard bytes,
// the output of n elements of size es, Guard bytes; the error reports
// elements of the output by index and guard bytes by their offset from
// the output's ends.
func Compare(what string, got, want []byte, es int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: read %d bytes, want %d", what, len(got), len(want))
	}
	if bytes.Equal(got, want) {
		return nil
	}
	return compare(what, got, want, es, Guard, nil)
}

// CompareBare is Compare for a window without guard bytes (a sample of a
// large output).
func CompareBare(what string, got, want []byte, es int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: read %d bytes, want %d", what, len(got), len(want))
	}
	if bytes.Equal(got, want) {
		return nil
	}
	return compare(what, got, want, es, 0, nil)
}

// elemCheck judges the elements that differ from want by their bytes.
type elemCheck interface {
	ok(k int, got []byte) bool               // element k passes anyway
	describe(k int, got, want []byte) string // the report of a failed element
}

func compare(what string, got, want []byte, es, guard int, check elemCheck) error {
	m := &Mismatch{What: what}
	lo, hi := guard, len(want)-guard
	if hi < lo {
		lo, hi = 0, len(want)
	}
	m.Total = (hi - lo) / es
	for i := range lo {
		if got[i] != want[i] {
			m.Guard++
			if len(m.Examples) < maxExamples {
				m.Examples = append(m.Examples, fmt.Sprintf("guard byte %d before the output is %#02x, was %#02x", lo-i, got[i], want[i]))
			}
		}
	}
	for e := range m.Total {
		g, w := got[lo+e*es:lo+(e+1)*es], want[lo+e*es:lo+(e+1)*es]
		if bytes.Equal(g, w) || check != nil && check.ok(e, g) {
			continue
		}
		m.Elems++
		if len(m.Examples) < maxExamples {
			if check != nil {
				m.Examples = append(m.Examples, check.describe(e, g, w))
			} else {
				m.Examples = append(m.Examples, fmt.Sprintf("[%d]=%x want %x", e, g, w))
			}
		}
	}
	for i := hi; i < len(want); i++ {
		if got[i] != want[i] {
			m.Guard++
			if len(m.Examples) < maxExamples {
				m.Examples = append(m.Examples, fmt.Sprintf("guard byte %d after the output is %#02x, was %#02x", i-hi, got[i], want[i]))
			}
		}
	}
	if m.Elems == 0 && m.Guard == 0 {
		return nil
	}
	return m
}

// Expect returns the window a check of an output at byte at of a buffer
// should read: before (the buffer's contents before the call) from at-Guard
// to at+len(out)+Guard, with out in its place. It panics when the buffer
// has no Guard bytes on either side of the output.
func Expect(before []byte, at int, out []byte) []byte {
	if at < Guard || at+len(out)+Guard > len(before) {
		panic(fmt.Sprintf("pattern: output [%d, %d) of a %d-byte buffer leaves no %d guard bytes", at, at+len(out), len(before), Guard))
	}
	w := append([]byte(nil), before[at-Guard:at+len(out)+Guard]...)
	copy(w[Guard:], out)
	return w
}
