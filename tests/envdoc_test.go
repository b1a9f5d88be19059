package tests

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnvDoc keeps docs/ENVIRONMENT.md true (CPU only, no GPU): every
// NCCL_* and NCCLGO_* variable that the library and its tools read has a
// row there, and every row names a variable that some code reads.
//
// "Read" means a Go string literal that is exactly such a name ("NCCL_ALGO",
// const EnvPDL = "NCCLGO_PDL") in a non-test Go file of the root package,
// runtime/, capi/, internal/launch/ or cmd/. A name inside longer text (an
// error message about another variable) is not a literal of its own and
// does not count. "Documented" means the name in backticks in the first
// cell of a table row of the page.
func TestEnvDoc(t *testing.T) {
	root := repoRoot(t)
	code := envVarsInCode(t, root)
	// Guard against a scan that silently finds nothing.
	require.Contains(t, code, "NCCL_ALGO", "the scan found no NCCL_ALGO literal: is it looking at the right files?")
	require.Contains(t, code, "NCCLGO_PDL", "the scan found no NCCLGO_PDL literal: is it looking at the right files?")

	doc, dups := envVarsInDoc(t, filepath.Join(root, envDocPath))
	assert.Empty(t, dups, "variables with more than one row in %s", envDocPath)

	var undocumented []string
	for name, file := range code {
		if !doc[name] {
			undocumented = append(undocumented, name+" (read in "+file+")")
		}
	}
	slices.Sort(undocumented)
	assert.Empty(t, undocumented, "variables the code reads that %s has no row for (add a row: | `NAME` | default | what it does | where |)", envDocPath)

	var stale []string
	for name := range doc {
		if _, ok := code[name]; !ok {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	assert.Empty(t, stale, "variables %s lists that no code reads (or that envDocExcluded leaves out)", envDocPath)
}

// envDocPath is the page, relative to the repository root.
const envDocPath = "docs/ENVIRONMENT.md"

// envDocDirs are the trees scanned, relative to the repository root; the
// root package's own files are scanned too (not its subdirectories).
var envDocDirs = []string{"runtime", "capi", "internal/launch", "cmd"}

// envDocExcludedPrefixes are plumbing, not settings for users: variables
// that test suites and child processes pass among themselves.
var envDocExcludedPrefixes = []string{
	"NCCLGO_LAUNCH_", // set by ncclperf's launcher (internal/launch) for its own children
	"NCCLGO_TEST_",   // test suites' knobs
	"NCCLGO_MP_",     // multi-process tests' children
	"NCCLGO_LEAK_",   // leak tests
	"NCCLGO_STRESS_", // stress tests
	"NCCLGO_GRAPH_",  // graph tests
	"NCCLGO_RANDOM_", // random tests
}

// envDocExcluded reports whether a name is left out of the page: the
// prefixes above, NCCLGO_BENCHGUARD_UPDATE (rewrites benchmark baselines
// in tests), any NCCLGO_*_TEST_* or NCCLGO_*_CHILD* (a test's child
// process), and a literal ending in '_' (a prefix the code matches
// against, not a variable).
func envDocExcluded(name string) bool {
	for _, p := range envDocExcludedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if name == "NCCLGO_BENCHGUARD_UPDATE" || strings.HasSuffix(name, "_") {
		return true
	}
	rest, own := strings.CutPrefix(name, "NCCLGO_")
	return own && (strings.Contains(rest, "_TEST_") || strings.Contains("_"+rest, "_CHILD"))
}

var envNameRE = regexp.MustCompile(`^NCCL(GO)?_[A-Z0-9_]+$`)

// repoRoot is the repository root: the directory above this file's.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok, "runtime.Caller")
	root := filepath.Dir(filepath.Dir(file))
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the repository root (%s) has no go.mod", root)
	return root
}

// envVarsInCode returns the variable names that the scanned files hold as
// string literals, each with the first file (relative to root) it is in.
func envVarsInCode(t *testing.T, root string) map[string]string {
	t.Helper()
	var files []string
	top, err := filepath.Glob(filepath.Join(root, "*.go"))
	require.NoError(t, err)
	files = append(files, top...)
	for _, d := range envDocDirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) {
				return filepath.SkipDir
			}
			if !e.IsDir() && strings.HasSuffix(path, ".go") {
				files = append(files, path)
			}
			return nil
		})
		require.NoError(t, err)
	}
	found := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		var s scanner.Scanner
		s.Init(fset.AddFile(rel, -1, len(src)), src, func(pos token.Position, msg string) {
			t.Errorf("%s: %s", pos, msg)
		}, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.STRING {
				continue
			}
			v, err := strconv.Unquote(lit)
			if err != nil || !envNameRE.MatchString(v) || envDocExcluded(v) {
				continue
			}
			if _, ok := found[v]; !ok {
				found[v] = filepath.ToSlash(rel)
			}
		}
	}
	return found
}

var (
	envDocRowName = regexp.MustCompile("`(NCCL(?:GO)?_[A-Z0-9_]+)`")
	envDocRule    = regexp.MustCompile(`^\|[\s|:-]*$`)
)

// envVarsInDoc returns the variables named in backticks in the first cell
// of the page's table rows, and the names that head more than one row.
func envVarsInDoc(t *testing.T, path string) (map[string]bool, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := map[string]bool{}
	var dups []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || envDocRule.MatchString(line) {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range envDocRowName.FindAllStringSubmatch(cells[1], -1) {
			if doc[m[1]] {
				dups = append(dups, m[1])
			}
			doc[m[1]] = true
		}
	}
	return doc, dups
}
