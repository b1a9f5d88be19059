// Package kset defines the kernel-set file that `ncclgen build` writes and
// the runtime loads: a kernel set describes itself, so that any ncclgo
// binary can run any kernel set built from the same ABI, a slim set made in
// a user's own module included.
//
// The file is a small container:
//
//	offset 0   magic "NGKSET\r\n" (8 bytes)
//	offset 8   manifest length, uint32 little-endian
//	offset 12  image offset, uint32 little-endian (a multiple of 64)
//	offset 16  the manifest, JSON (see Manifest)
//	...        zero padding
//	image off  the fatbin (or cubin, or PTX) that cuModuleLoadData loads
//
// The manifest travels next to the image rather than inside it (as a device
// global, say) so that reading it needs no driver and no assumption about
// what nvcc, nvlink or link-time optimisation keep, and so that tools
// (ncclgen, tests) can inspect a set on machines without a GPU.
package kset

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Magic starts every kernel-set file.
const Magic = "NGKSET\r\n"

// FormatVersion is the version of the manifest's JSON layout.
const FormatVersion = 1

// FileName is the manifest's name in a generated tree; `ncclgen build`
// wraps it around the fatbin it builds from that tree.
const FileName = "kernelset.json"

const headerSize = 16
const imageAlign = 64

// ErrNoManifest means the bytes are a bare image with no kernel-set
// manifest in front (an image built by hand, or by an older ncclgen).
var ErrNoManifest = errors.New("kset: image has no kernel-set manifest")

// ErrCorrupt means the container or its manifest is malformed.
var ErrCorrupt = errors.New("kset: malformed kernel set")

// Manifest describes a kernel set: what it was built from and the device
// function table that its image holds.
type Manifest struct {
	// Format is FormatVersion.
	Format int `json:"format"`
	// ABI is the host↔device ABI version (abi.Version) of the generated
	// tree the image was compiled from.
	ABI string `json:"abi"`
	// Filter is the slim-build pattern; empty keeps every function.
	Filter string `json:"filter"`
	// Arches are the SM arches of the image's SASS ("sm_90"), and PTX the
	// virtual arch of its PTX ("compute_90") when it has one.
	Arches []string `json:"arches"`
	PTX    string   `json:"ptx,omitempty"`
	// FuncTable is the device function table's symbol.
	FuncTable string `json:"func_table"`
	// Funcs is the device function table: entry i has function id i.
	Funcs []Func `json:"funcs"`
	// Kernels are the image's __global__ functions.
	Kernels []Kernel `json:"kernels"`
	// Aliases completes the row → function id map: a row whose function
	// is not itself in Funcs but shares the code of one that is (signed
	// integer sums run the unsigned implementation) maps its function's
	// name to that id. Every function of Funcs maps its own row to its id;
	// every other row is not in the set.
	Aliases map[string]int `json:"aliases"`
}

// FuncTableBytes is the size of a device function table of n functions:
// a pointer for each and a null terminator.
func FuncTableBytes(n int) uint64 { return 8 * uint64(n+1) }

// Func is one entry of the device function table.
type Func struct {
	// Name is the function's words ("AllReduce Sum f32 RING LL"), or "Nop"
	// for the entry that rows left out by the filter map to.
	Name string `json:"f"`
	// Kernel indexes Kernels: the kernel that runs this function.
	Kernel int `json:"k"`
	// Specialized is true when that kernel runs the function inline.
	Specialized bool `json:"s,omitempty"`
	// Implemented is false for device stubs that report "unsupported".
	Implemented bool `json:"i,omitempty"`
}

// Kernel is one __global__ function of the image.
type Kernel struct {
	// Name is the function the kernel is specialized for, or "Generic".
	Name string `json:"f"`
	// Symbol is its extern "C" name.
	Symbol string `json:"sym"`
}

// Validate checks the manifest's internal consistency (not its names,
// which only the kernel-space model can check).
func (m *Manifest) Validate() error {
	switch {
	case m.Format != FormatVersion:
		return fmt.Errorf("%w: manifest format %d, this ncclgo reads format %d", ErrCorrupt, m.Format, FormatVersion)
	case m.ABI == "":
		return fmt.Errorf("%w: manifest has no ABI version", ErrCorrupt)
	case m.FuncTable == "":
		return fmt.Errorf("%w: manifest names no function table", ErrCorrupt)
	case len(m.Funcs) == 0 || len(m.Kernels) == 0:
		return fmt.Errorf("%w: manifest has %d functions and %d kernels", ErrCorrupt, len(m.Funcs), len(m.Kernels))
	}
	for i, f := range m.Funcs {
		if f.Name == "" || f.Kernel < 0 || f.Kernel >= len(m.Kernels) {
			return fmt.Errorf("%w: function %d (%q) has kernel %d of %d", ErrCorrupt, i, f.Name, f.Kernel, len(m.Kernels))
		}
	}
	for i, k := range m.Kernels {
		if k.Name == "" || k.Symbol == "" {
			return fmt.Errorf("%w: kernel %d has no name or symbol", ErrCorrupt, i)
		}
	}
	for name, id := range m.Aliases {
		if id < 0 || id >= len(m.Funcs) {
			return fmt.Errorf("%w: alias %q maps to function %d of %d", ErrCorrupt, name, id, len(m.Funcs))
		}
	}
	return nil
}

// Encode returns the manifest as JSON (deterministic: map keys sorted).
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Decode parses and validates a manifest.
func Decode(b []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Wrap returns the kernel-set file of manifest and image.
func Wrap(m *Manifest, image []byte) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if len(image) == 0 {
		return nil, fmt.Errorf("%w: empty image", ErrCorrupt)
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	off := (headerSize + len(js) + imageAlign - 1) / imageAlign * imageAlign
	out := make([]byte, off+len(image))
	copy(out, Magic)
	binary.LittleEndian.PutUint32(out[8:], uint32(len(js)))
	binary.LittleEndian.PutUint32(out[12:], uint32(off))
	copy(out[headerSize:], js)
	copy(out[off:], image)
	return out, nil
}

// IsSet reports whether b starts like a kernel-set file.
func IsSet(b []byte) bool { return bytes.HasPrefix(b, []byte(Magic)) }

// Split parses a kernel-set file into its manifest and its image (a
// subslice of b). Bytes without the magic are ErrNoManifest.
func Split(b []byte) (*Manifest, []byte, error) {
	if !IsSet(b) {
		return nil, nil, ErrNoManifest
	}
	if len(b) < headerSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	n := int64(binary.LittleEndian.Uint32(b[8:]))
	off := int64(binary.LittleEndian.Uint32(b[12:]))
	if headerSize+n > off || off >= int64(len(b)) {
		return nil, nil, fmt.Errorf("%w: manifest of %d bytes and image at offset %d in a file of %d bytes", ErrCorrupt, n, off, len(b))
	}
	m, err := Decode(b[headerSize : headerSize+n])
	if err != nil {
		return nil, nil, err
	}
	return m, b[off:], nil
}
