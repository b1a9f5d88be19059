package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// DebugLevel is NCCL_DEBUG: how much the runtime logs. The values are NCCL's
// (ncclDebugLogLevel).
type DebugLevel int

// The levels of NCCL_DEBUG, in NCCL's order.
const (
	DebugNone    DebugLevel = iota // unset: nothing is logged
	DebugVersion                   // the version line only
	DebugWarn                      // warnings
	DebugInfo                      // warnings and information
	DebugAbort                     // as INFO (NCCL also aborts on a warning; ncclgo does not)
	DebugTrace                     // everything, including per-call traces
)

var debugLevelNames = [...]string{"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"}

func (l DebugLevel) String() string {
	if l < 0 || int(l) >= len(debugLevelNames) {
		return "DebugLevel(" + strconv.Itoa(int(l)) + ")"
	}
	return debugLevelNames[l]
}

// ParseDebugLevel parses an NCCL_DEBUG value, case-insensitively: VERSION,
// WARN, INFO, ABORT or TRACE (and NONE, or the empty string, for none).
func ParseDebugLevel(s string) (DebugLevel, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DebugNone, nil
	}
	for i, n := range debugLevelNames {
		if strings.EqualFold(s, n) {
			return DebugLevel(i), nil
		}
	}
	return 0, fmt.Errorf("unknown debug level %q", s)
}

// LevelVersion is the slog level of the version line, which NCCL prints at
// every NCCL_DEBUG level but NONE.
const LevelVersion = slog.LevelError + 4

// SlogLevel is the least slog level that the debug level lets through:
// VERSION -> LevelVersion, WARN -> Warn, INFO and ABORT -> Info, TRACE ->
// Debug. NONE returns a level above every record's.
func (l DebugLevel) SlogLevel() slog.Level {
	switch l {
	case DebugVersion:
		return LevelVersion
	case DebugWarn:
		return slog.LevelWarn
	case DebugInfo, DebugAbort:
		return slog.LevelInfo
	case DebugTrace:
		return slog.LevelDebug
	}
	return LevelVersion + 1
}

// Subsys is a set of NCCL_DEBUG_SUBSYS subsystems, with NCCL's bit values.
type Subsys uint64

// The subsystems of NCCL_DEBUG_SUBSYS.
const (
	SubsysInit Subsys = 1 << iota
	SubsysColl
	SubsysP2P
	SubsysSHM
	SubsysNet
	SubsysGraph
	SubsysTuning
	SubsysEnv
	SubsysAlloc
	SubsysCall
	SubsysProxy
	SubsysNVLS
	SubsysBootstrap
	SubsysReg
	SubsysProfile
	SubsysRAS
	// SubsysAll is every subsystem (NCCL's ALL).
	SubsysAll Subsys = ^Subsys(0)
	// DefaultSubsys is NCCL's default mask: INIT, BOOTSTRAP and ENV.
	DefaultSubsys = SubsysInit | SubsysBootstrap | SubsysEnv
)

var subsysNames = [...]string{"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS"}

// String lists the subsystems joined by '|' ("INIT|ENV"), "ALL" for all.
func (s Subsys) String() string {
	if s == SubsysAll {
		return "ALL"
	}
	var parts []string
	for i, n := range subsysNames {
		if s&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if rest := s &^ (1<<len(subsysNames) - 1); rest != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	if len(parts) == 0 {
		return "NONE"
	}
	return strings.Join(parts, "|")
}

// ParseSubsys parses an NCCL_DEBUG_SUBSYS value: a comma-separated,
// case-insensitive list of subsystem names (INIT, COLL, P2P, SHM, NET, GRAPH,
// TUNING, ENV, ALLOC, CALL, PROXY, NVLS, BOOTSTRAP, REG, PROFILE, RAS, ALL).
// A leading '^' inverts it: every subsystem but those listed. Unlike NCCL,
// which ignores names it does not know, an unknown name is an error.
func ParseSubsys(v string) (Subsys, error) {
	v = strings.TrimSpace(v)
	invert := strings.HasPrefix(v, "^")
	var mask Subsys
	if invert {
		v, mask = v[1:], SubsysAll
	}
	for tok := range strings.SplitSeq(v, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		b, ok := lookupSubsys(tok)
		if !ok {
			return 0, fmt.Errorf("unknown subsystem %q", tok)
		}
		if invert {
			mask &^= b
		} else {
			mask |= b
		}
	}
	return mask, nil
}

func lookupSubsys(name string) (Subsys, bool) {
	if strings.EqualFold(name, "ALL") {
		return SubsysAll, true
	}
	for i, n := range subsysNames {
		if strings.EqualFold(name, n) {
			return 1 << i, true
		}
	}
	return 0, false
}

var subsysWant = strings.Join(subsysNames[:], ", ") + ", ALL, comma-separated, optionally after '^'"

// ExpandDebugFile expands NCCL_DEBUG_FILE's patterns as NCCL does: %h is the
// host name, %p the process id, %% a percent sign; any other %x is kept.
func ExpandDebugFile(pattern, host string, pid int) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '%' || i+1 == len(pattern) {
			b.WriteByte(c)
			continue
		}
		i++
		switch pattern[i] {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}

// OpenDebugFile opens where the log goes: NCCL_DEBUG_FILE, expanded, when
// it is set and NCCL_DEBUG is above VERSION (as NCCL does); standard
// output otherwise, behind a Close that does nothing. The caller closes
// what it gets.
//
// A process opens each debug file once: every resolution of the options
// that names the same file (GetUniqueID and then InitRank, a Split with
// options, the ranks of InitAll) shares one descriptor, which the last
// Close closes. The first open in the process truncates the file; a later
// one (also after the last Close) appends, so that no resolution
// overwrites another's lines. The file is opened with O_APPEND: every
// write lands at its end, also when several processes share it (a name
// without %p).
func (c Config) OpenDebugFile() (io.WriteCloser, error) {
	if c.DebugFile == "" || c.Debug <= DebugVersion {
		return nopCloser{os.Stdout}, nil
	}
	host, _ := os.Hostname()
	if i := strings.IndexByte(host, '.'); i > 0 {
		host = host[:i] // NCCL cuts the host name at the first '.'
	}
	w, err := openShared(ExpandDebugFile(c.DebugFile, host, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("config: NCCL_DEBUG_FILE=%q: %w", c.DebugFile, err)
	}
	return w, nil
}

// debugFiles are the debug files this process has open, by absolute path,
// and the paths it has opened (truncated) before.
var debugFiles = struct {
	sync.Mutex
	open   map[string]*sharedFile
	opened map[string]bool
}{open: map[string]*sharedFile{}, opened: map[string]bool{}}

// sharedFile is one open debug file and the number of handles on it.
type sharedFile struct {
	f    *os.File
	refs int
}

// openShared returns a handle on the debug file at path, opening it if no
// handle is open (truncating it the first time in this process).
func openShared(path string) (*debugHandle, error) {
	key, err := filepath.Abs(path)
	if err != nil {
		key = path
	}
	debugFiles.Lock()
	defer debugFiles.Unlock()
	sf := debugFiles.open[key]
	if sf == nil {
		f, err := openDebugFile(path, !debugFiles.opened[key])
		if err != nil {
			return nil, err
		}
		debugFiles.opened[key] = true
		sf = &sharedFile{f: f}
		debugFiles.open[key] = sf
	}
	sf.refs++
	return &debugHandle{key: key, f: sf.f}, nil
}

// openDebugFile opens path for appending, truncating it when trunc is set
// and it is a regular file. A symbolic link at path is followed only to
// what is not a regular file (/dev/stderr, a pipe): a link planted where
// the log goes (in a shared /tmp) must not let the job truncate or write
// into the file it points at.
func openDebugFile(path string, trunc bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o666)
	if errors.Is(err, syscall.ELOOP) {
		// A symbolic link: follow it, creating nothing.
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return nil, err
		}
		if st, serr := f.Stat(); serr != nil || st.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%s is a symbolic link to a regular file: name the file itself (links are followed only to devices and pipes, such as /dev/stderr)", path)
		}
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); trunc && err == nil && st.Mode().IsRegular() {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// debugHandle is one user's handle on a shared debug file.
type debugHandle struct {
	key  string
	f    *os.File
	once sync.Once
	err  error
}

func (h *debugHandle) Write(p []byte) (int, error) { return h.f.Write(p) }

// Close releases the handle; the last one closes the file. Closing a
// handle again does nothing.
func (h *debugHandle) Close() error {
	h.once.Do(func() {
		debugFiles.Lock()
		defer debugFiles.Unlock()
		sf := debugFiles.open[h.key]
		if sf.refs--; sf.refs == 0 {
			delete(debugFiles.open, h.key)
			h.err = sf.f.Close()
		}
	})
	return h.err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
