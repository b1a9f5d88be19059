package nvbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// cacheSchema is mixed into every key; bump it when the key recipe or the
// command lines change.
const cacheSchema = "ncclgo-nvbuild-1"

// DefaultCacheDir is $XDG_CACHE_HOME/ncclgo, else ~/.cache/ncclgo, else
// build/cache.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil && d != "" {
		return filepath.Join(d, "ncclgo")
	}
	return filepath.Join("build", "cache")
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\x00", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileHasher hashes files once per build.
type fileHasher struct {
	mu sync.Mutex
	m  map[string]*hashEntry
}

type hashEntry struct {
	once sync.Once
	sum  string
	err  error
}

func newFileHasher() *fileHasher { return &fileHasher{m: map[string]*hashEntry{}} }

func (h *fileHasher) hash(path string) (string, error) {
	h.mu.Lock()
	e := h.m[path]
	if e == nil {
		e = &hashEntry{}
		h.m[path] = e
	}
	h.mu.Unlock()
	e.once.Do(func() {
		f, err := os.Open(path)
		if err != nil {
			e.err = err
			return
		}
		defer f.Close()
		s := sha256.New()
		if _, err := io.Copy(s, f); err != nil {
			e.err = err
			return
		}
		e.sum = hex.EncodeToString(s.Sum(nil))
	})
	return e.sum, e.err
}

// store is the on-disk cache.
type store struct{ dir string }

func (s store) path(kind, key, ext string) string {
	return filepath.Join(s.dir, kind, key[:2], key+ext)
}

func (s store) tempDir() (string, error) {
	base := filepath.Join(s.dir, "tmp")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, "job-")
}

// put moves src (a file in the cache's tmp dir) to its final place.
func (s store) put(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.Rename(src, dst)
}

// depsRecord is what the cache keeps under a deps key: the files (besides
// the unit itself) that the last compile read, as nvcc -MMD listed them.
type depsRecord struct {
	Deps []string `json:"deps"`
}

func (s store) readDeps(key string) (*depsRecord, bool) {
	data, err := os.ReadFile(s.path("deps", key, ".json"))
	if err != nil {
		return nil, false
	}
	var r depsRecord
	if json.Unmarshal(data, &r) != nil {
		return nil, false
	}
	return &r, true
}

func (s store) writeDeps(key string, r *depsRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path("deps", key, ".json"), data)
}

// writeFileAtomic writes data to a temporary file next to p and renames it.
func writeFileAtomic(p string, data []byte) error {
	return writeAtomic(p, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// copyFileAtomic copies src to dst through a temporary file next to dst.
func copyFileAtomic(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeAtomic(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// writeAtomic makes p's directory, has write fill a temporary file next
// to p and renames it to p; on any failure the temporary file is removed
// and p is left as it was.
func writeAtomic(p string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	werr := write(f)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp)
		if werr != nil {
			return werr
		}
		return cerr
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// parseDepfile parses a make-style dependency file as nvcc -MMD writes it
// and returns the prerequisites (all targets' prerequisites, in order,
// de-duplicated).
func parseDepfile(data []byte) []string {
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	var deps []string
	seen := map[string]bool{}
	for _, rule := range splitLogicalLines(s) {
		colon := findRuleColon(rule)
		if colon < 0 {
			continue
		}
		for _, d := range splitEscaped(rule[colon+1:]) {
			if !seen[d] {
				seen[d] = true
				deps = append(deps, d)
			}
		}
	}
	return deps
}

// splitLogicalLines joins backslash-newline continuations.
func splitLogicalLines(s string) []string {
	var lines []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && s[i+1] == '\n' {
			cur.WriteByte(' ')
			i++
			continue
		}
		if c == '\n' {
			lines = append(lines, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// findRuleColon finds the target/prerequisite separator, skipping drive
// letters ("C:\...") and escaped colons.
func findRuleColon(line string) int {
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' {
			i++
			continue
		}
		if line[i] == ':' {
			if i == 1 || (i >= 2 && line[i-2] == ' ') {
				if i+1 < len(line) && (line[i+1] == '\\' || line[i+1] == '/') {
					continue
				}
			}
			return i
		}
	}
	return -1
}

// splitEscaped splits on unescaped whitespace; "\ " is a space, "$$" a '$'.
func splitEscaped(s string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && (s[i+1] == ' ' || s[i+1] == '#' || s[i+1] == ':'):
			cur.WriteByte(s[i+1])
			i++
		case c == '$' && i+1 < len(s) && s[i+1] == '$':
			cur.WriteByte('$')
			i++
		case c == ' ' || c == '\t':
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
