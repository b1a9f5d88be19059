package abi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// Version identifies the host↔device ABI: a hash of every declared struct
// (name, fields, types, counts and computed layout) and of the constants in
// Consts and extra (the kernel space's numbers that the device library
// also compiles in). Two builds agree on the ABI exactly when their
// versions are equal; a kernel set records the version it was built with
// and the runtime refuses a set of another version.
//
// It is 16 hex digits, stable across runs and platforms.
func Version(extra ...Const) string {
	h := sha256.New()
	io.WriteString(h, "ncclgo-abi-1\n")
	for _, c := range append(append([]Const(nil), Consts...), extra...) {
		fmt.Fprintf(h, "const %s=%d\n", c.Name, c.Value)
	}
	for _, st := range Structs {
		writeStruct(h, st)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func writeStruct(w io.Writer, st *Struct) {
	l := st.Layout()
	fmt.Fprintf(w, "struct %s size=%d align=%d\n", st.Name, l.Size, l.Align)
	for i, f := range st.Fields {
		typ := ""
		if f.Struct != nil {
			typ = "struct " + f.Struct.Name
		} else {
			typ = f.Scalar.CType()
		}
		fmt.Fprintf(w, "  %s %s[%d] @%d\n", typ, f.Name, f.Count, l.Offsets[i])
	}
}
