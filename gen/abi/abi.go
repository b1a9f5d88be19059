// Package abi declares, once, the memory layout shared by the host runtime
// and the device library: kernel arguments, work descriptors, connection
// info, channels and the device communicator. The generator emits it as a
// C header (with static_asserts on every offset and size) and as Go structs
// (whose layout the tests check with reflect/unsafe), so a mismatch fails a
// build or a test, never a kernel at run time.
//
// Layout follows C's natural alignment: each field aligned to its own size,
// each struct to its largest field, sizes padded to that alignment. Pointers
// cross the boundary as 64-bit integers (device addresses).
package abi

import (
	"fmt"
	"strings"
)

// Scalar is a fixed-width integer type.
type Scalar int

// The scalar types.
const (
	U8 Scalar = iota
	U16
	U32
	U64
	I32
	I64
)

var scalarC = [...]string{"uint8_t", "uint16_t", "uint32_t", "uint64_t", "int32_t", "int64_t"}
var scalarGo = [...]string{"uint8", "uint16", "uint32", "uint64", "int32", "int64"}
var scalarSize = [...]int{1, 2, 4, 8, 4, 8}

// CType is the C spelling of s.
func (s Scalar) CType() string { return scalarC[s] }

// GoType is the Go spelling of s.
func (s Scalar) GoType() string { return scalarGo[s] }

// Size is s's size and alignment in bytes.
func (s Scalar) Size() int { return scalarSize[s] }

// Field is one member of a struct: a scalar or a nested struct, optionally an
// array of Count elements (Count 0 means a single element).
type Field struct {
	Name   string // C name (camelCase); the Go name is its exported form
	Scalar Scalar
	Struct *Struct // nested struct, when not nil
	Count  int
	Doc    string
}

// Struct is one declared structure.
type Struct struct {
	Name   string // C name; the Go name drops the "ng" prefix
	Doc    string
	Fields []Field
	// Size, when not zero, is the size the struct must have: the layout
	// check fails otherwise.
	Size int
}

// Const is one integer constant shared by both sides.
type Const struct {
	Name  string // C macro name (NG_...); the Go name is derived
	Value int64
	Doc   string
}

// Layout is a struct's computed layout.
type Layout struct {
	Offsets []int
	Size    int
	Align   int
}

func (f Field) elemSizeAlign() (size, align int) {
	if f.Struct != nil {
		l := f.Struct.Layout()
		return l.Size, l.Align
	}
	return f.Scalar.Size(), f.Scalar.Size()
}

// Layout computes offsets, size and alignment with C's rules.
func (s *Struct) Layout() Layout {
	var l Layout
	l.Align = 1
	off := 0
	for _, f := range s.Fields {
		size, align := f.elemSizeAlign()
		if f.Count > 0 {
			size *= f.Count
		}
		off = (off + align - 1) / align * align
		l.Offsets = append(l.Offsets, off)
		off += size
		l.Align = max(l.Align, align)
	}
	l.Size = (off + l.Align - 1) / l.Align * l.Align
	return l
}

// Check verifies declared sizes and that no field needs implicit padding
// (every pad is explicit, so both sides agree by construction).
func (s *Struct) Check() error {
	l := s.Layout()
	if s.Size != 0 && l.Size != s.Size {
		return fmt.Errorf("abi: %s is %d bytes, declared %d", s.Name, l.Size, s.Size)
	}
	end := 0
	for i, f := range s.Fields {
		if l.Offsets[i] != end {
			return fmt.Errorf("abi: %s.%s at offset %d leaves %d bytes of implicit padding; declare it", s.Name, f.Name, l.Offsets[i], l.Offsets[i]-end)
		}
		size, _ := f.elemSizeAlign()
		if f.Count > 0 {
			size *= f.Count
		}
		end += size
	}
	if end != l.Size {
		return fmt.Errorf("abi: %s ends at %d but is %d bytes; declare the tail padding", s.Name, end, l.Size)
	}
	return nil
}

// GoName is the exported Go name of a C name ("ngDevWork" → "DevWork",
// "sendbuff" → "Sendbuff").
func GoName(c string) string {
	if len(c) > 2 && c[:2] == "ng" && c[2] >= 'A' && c[2] <= 'Z' {
		c = c[2:]
	}
	if c == "" {
		return c
	}
	b := []byte(c)
	if b[0] >= 'a' && b[0] <= 'z' {
		b[0] -= 'a' - 'A'
	}
	return string(b)
}

// ConstGoName is the Go name of a constant ("NG_MAX_CHANNELS" →
// "MaxChannels"): each upper-case word is title-cased; a word that already
// has lower-case letters keeps its spelling ("NG_COLL_AllReduce" →
// "CollAllReduce").
func ConstGoName(c string) string {
	if len(c) > 3 && c[:3] == "NG_" {
		c = c[3:]
	}
	var out strings.Builder
	for _, w := range strings.Split(c, "_") {
		if w == "" {
			continue
		}
		if strings.ToUpper(w) != w {
			out.WriteString(strings.ToUpper(w[:1]) + w[1:])
			continue
		}
		out.WriteString(w[:1] + strings.ToLower(w[1:]))
	}
	return out.String()
}
