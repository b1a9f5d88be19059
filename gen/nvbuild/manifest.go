package nvbuild

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ManifestName is the build manifest's file name inside the generated tree.
const ManifestName = "manifest.json"

// ManifestVersion is the manifest schema version this package understands.
const ManifestVersion = 1

// ErrBadManifest is wrapped by every error about a missing or malformed
// build manifest.
var ErrBadManifest = errors.New("bad build manifest")

// Manifest is <gendir>/manifest.json, written by the generator.
type Manifest struct {
	Version int `json:"version"`
	// Filter is the kernel-space filter the tree was generated with; "" means
	// everything.
	Filter string `json:"filter"`
	// Arches are the generator's suggested targets ("sm_90"); Build uses
	// them when no arch is given and no GPU is detected.
	Arches []string `json:"arches"`
	// IncludeDirs are relative to the manifest's directory.
	IncludeDirs []string `json:"include_dirs"`
	// NVCCFlags are extra nvcc flags for every unit.
	NVCCFlags []string `json:"nvcc_flags"`
	Units     []Unit   `json:"units"`

	// Dir is the directory the manifest was loaded from (not in the JSON).
	Dir string `json:"-"`
}

// Unit is one generated translation unit.
type Unit struct {
	// File is the .cu file, relative to the manifest's directory.
	File      string   `json:"file"`
	Coll      string   `json:"coll"`
	Functions []string `json:"functions"`
	Kernels   []string `json:"kernels"`
	Requires  Requires `json:"requires"`
}

// Requires is what a unit's functions need. The sources guard themselves, so
// every unit is compiled for every arch regardless; Build only notes it.
type Requires struct {
	// CUDART is a CUDA runtime version like 12010 (12.1); 0 = any.
	CUDART int `json:"cudart"`
	// Arch is an SM version like 900 (sm_90); 0 = any.
	Arch int `json:"arch"`
}

// LoadManifest reads and validates <genDir>/manifest.json, and checks that
// every unit file and include directory exists.
func LoadManifest(genDir string) (*Manifest, error) {
	p := filepath.Join(genDir, ManifestName)
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist (run ncclgen generate first, or pass --gen DIR)", ErrBadManifest, p)
		}
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	m.Dir = genDir
	for _, d := range m.IncludeDirs {
		st, err := os.Stat(filepath.Join(genDir, filepath.FromSlash(d)))
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s: %w: include dir %q is not a directory (relative to %s)", p, ErrBadManifest, d, genDir)
		}
	}
	for _, u := range m.Units {
		st, err := os.Stat(filepath.Join(genDir, filepath.FromSlash(u.File)))
		if err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %w: unit %q does not exist (relative to %s)", p, ErrBadManifest, u.File, genDir)
		}
	}
	return m, nil
}

// ParseManifest decodes and validates a manifest; it does not touch the file
// system.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			line, col := lineCol(data, se.Offset)
			return nil, fmt.Errorf("%w: line %d col %d: %v", ErrBadManifest, line, col, err)
		case errors.As(err, &te):
			line, col := lineCol(data, te.Offset)
			return nil, fmt.Errorf("%w: line %d col %d: field %q: %v", ErrBadManifest, line, col, te.Field, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrBadManifest)
	}
	switch {
	case m.Version == 0:
		return nil, fmt.Errorf("%w: missing \"version\" (want %d)", ErrBadManifest, ManifestVersion)
	case m.Version != ManifestVersion:
		return nil, fmt.Errorf("%w: version %d, this ncclgen understands version %d (regenerate, or update ncclgen)", ErrBadManifest, m.Version, ManifestVersion)
	case len(m.Units) == 0:
		return nil, fmt.Errorf("%w: no units", ErrBadManifest)
	}
	for i, d := range m.IncludeDirs {
		if strings.TrimSpace(d) == "" {
			return nil, fmt.Errorf("%w: include_dirs[%d] is empty", ErrBadManifest, i)
		}
	}
	for i, f := range m.NVCCFlags {
		if f == "" {
			return nil, fmt.Errorf("%w: nvcc_flags[%d] is empty", ErrBadManifest, i)
		}
	}
	seen := make(map[string]int, len(m.Units))
	for i, u := range m.Units {
		switch {
		case u.File == "":
			return nil, fmt.Errorf("%w: units[%d]: missing \"file\"", ErrBadManifest, i)
		case path.IsAbs(u.File) || filepath.IsAbs(u.File):
			return nil, fmt.Errorf("%w: units[%d]: file %q must be relative to the manifest", ErrBadManifest, i, u.File)
		case !strings.HasSuffix(u.File, ".cu"):
			return nil, fmt.Errorf("%w: units[%d]: file %q is not a .cu file", ErrBadManifest, i, u.File)
		case u.Requires.Arch < 0 || u.Requires.CUDART < 0:
			return nil, fmt.Errorf("%w: units[%d] (%s): negative requires", ErrBadManifest, i, u.File)
		}
		clean := path.Clean(u.File)
		if j, dup := seen[clean]; dup {
			return nil, fmt.Errorf("%w: units[%d] and units[%d] are both %q", ErrBadManifest, j, i, u.File)
		}
		seen[clean] = i
	}
	return &m, nil
}

func lineCol(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col = 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}
