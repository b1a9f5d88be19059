package kernels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ncclgo/ncclgo/kset"
)

// EnvFatbin names the environment variable that points at a kernel image.
const EnvFatbin = "NCCLGO_FATBIN"

// DefaultImage is where `ncclgen build` and `make` write the kernel set
// (a manifest and the fatbin, see package kset), relative to the
// repository root.
const DefaultImage = "build/ncclgo.fatbin"

// ErrNoImage is returned (wrapped) when no kernel image can be found or
// read.
var ErrNoImage = errors.New("kernels: no kernel image")

// EmbeddedSource is the source FindImage reports for the image compiled
// into the binary.
const EmbeddedSource = "embedded image"

// fatbinMagic starts every fatbin (fatBinaryHeader.magic, little-endian).
const fatbinMagic = 0xBA55ED50

// hint tells how to get an image.
const hint = "build one with `ncclgen build` (writes " + DefaultImage + ") or `make`, then set " + EnvFatbin + " to its path, pass its path (Options.KernelImage) or its bytes (Options.KernelImageBytes, say from //go:embed) in the options, or build with -tags ncclgo_embed to compile it in"

// FindImage finds the kernel image, in this order, and returns its bytes
// and where it came from:
//
//  1. explicitPath, when not empty (a program option);
//  2. the file that $NCCLGO_FATBIN names, when set;
//  3. the image compiled into the binary (build tag ncclgo_embed);
//  4. build/ncclgo.fatbin relative to the working directory and each of its
//     parents up to the module root (the directory holding go.mod), so that
//     `go test` in any package finds the repository's build;
//  5. build/ncclgo.fatbin relative to the executable's directory.
//
// An explicit path or $NCCLGO_FATBIN that cannot be read is an error, not a
// reason to look further. When nothing is found the error wraps ErrNoImage,
// lists every place tried and says how to build an image.
func FindImage(explicitPath string) ([]byte, string, error) {
	if explicitPath != "" {
		return readImage(explicitPath, explicitPath)
	}
	if p := os.Getenv(EnvFatbin); p != "" {
		return readImage(p, fmt.Sprintf("$%s=%s", EnvFatbin, p))
	}
	if img := embeddedImage(); len(img) > 0 {
		b, _, err := FromBytes(img)
		return b, EmbeddedSource, err
	}
	var tried []string
	tried = append(tried,
		"option path: not set",
		fmt.Sprintf("$%s: not set", EnvFatbin),
		EmbeddedSource+": not compiled in (no -tags ncclgo_embed)")
	var cands []string
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; {
			cands = append(cands, filepath.Join(dir, DefaultImage))
			if fileExists(filepath.Join(dir, "go.mod")) {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	} else {
		tried = append(tried, fmt.Sprintf("working directory: %v", err))
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		cands = append(cands, filepath.Join(filepath.Dir(exe), DefaultImage))
	} else {
		tried = append(tried, fmt.Sprintf("executable's directory: %v", err))
	}
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c] {
			continue
		}
		seen[c] = true
		b, src, err := readImage(c, c)
		if err == nil {
			return b, src, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			tried = append(tried, c+": no such file")
			continue
		}
		return nil, "", err // there, but unreadable or not an image
	}
	return nil, "", fmt.Errorf("%w found; tried:\n  %s\n%s", ErrNoImage, strings.Join(tried, "\n  "), hint)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func readImage(path, source string) ([]byte, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: reading %s: %w; %s", ErrNoImage, source, err, hint)
	}
	if err := checkImage(b); err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrNoImage, source, err)
	}
	return b, source, nil
}

// FromBytes accepts an image the program supplies (say, one it embedded
// itself), after the same sanity check FindImage applies to files: a fatbin,
// a cubin (ELF) or PTX text. The source it returns is "image supplied by the
// program".
func FromBytes(image []byte) ([]byte, string, error) {
	const src = "image supplied by the program"
	if err := checkImage(image); err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrNoImage, src, err)
	}
	return image, src, nil
}

// checkImage rejects bytes that are obviously not a kernel set: a
// kset container around something cuModuleLoadData accepts. Bare images
// pass here (Load says why it refuses them).
func checkImage(b []byte) error {
	if kset.IsSet(b) {
		_, img, err := kset.Split(b)
		if err != nil {
			return err
		}
		b = img
	}
	switch {
	case len(b) == 0:
		return errors.New("empty image")
	case len(b) >= 4 && binary.LittleEndian.Uint32(b) == fatbinMagic:
		return nil
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		return nil
	case bytes.Contains(b[:min(len(b), 4096)], []byte(".version")):
		return nil // PTX
	}
	return fmt.Errorf("not a fatbin, cubin or PTX image (starts with % x)", b[:min(len(b), 8)])
}
