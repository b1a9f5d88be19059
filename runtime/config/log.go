package config

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
)

// SubsysKey is the attribute key that names a record's subsystem(s). Attach
// it with Subsys.Attr, on a record or on a logger:
//
//	log := cfg.Logger(w).With(config.SubsysTuning.Attr())
//	log.Info("ring chosen", "bytes", n)
//	log.Info("bootstrap done", config.SubsysBootstrap.Attr())
//
// A string value naming subsystems ("NET", "INIT,ENV") works too.
const SubsysKey = "subsys"

// Attr returns the attribute that marks a record as belonging to s.
func (s Subsys) Attr() slog.Attr { return slog.Any(SubsysKey, s) }

// NewLogger returns a logger that writes to w in NCCL's line format
//
//	host:pid [rank] NCCL INFO message key=value ...
//
// (the bracket shows a "dev" or "rank" attribute when there is one) and lets
// through what NCCL_DEBUG and NCCL_DEBUG_SUBSYS enable: levels as
// DebugLevel.SlogLevel maps them; records below Warn only when one of their
// subsystems (SubsysKey attributes, of the record or of the logger) is in
// cfg.DebugSubsys. As in NCCL, warnings pass whatever their subsystem, and
// a record with no subsystem passes (NCCL logs it as ALL).
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	return slog.New(NewHandler(cfg, NewNCCLHandler(w)))
}

// NewHandler wraps inner with NCCL_DEBUG's level and NCCL_DEBUG_SUBSYS's
// subsystem filter (see NewLogger), for programs that want their own output
// format.
func NewHandler(cfg Config, inner slog.Handler) slog.Handler {
	return &filterHandler{inner: inner, min: cfg.Debug.SlogLevel(), mask: cfg.DebugSubsys}
}

type filterHandler struct {
	inner slog.Handler
	min   slog.Level
	mask  Subsys
	bound Subsys // subsystems bound by WithAttrs
}

func (h *filterHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.inner.Enabled(ctx, l)
}

func (h *filterHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.min {
		return nil
	}
	s := h.bound
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == SubsysKey {
			s |= subsysOf(a.Value)
		}
		return true
	})
	if r.Level < slog.LevelWarn && s != 0 && s&h.mask == 0 {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *filterHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	for _, a := range as {
		if a.Key == SubsysKey {
			h2.bound |= subsysOf(a.Value)
		}
	}
	h2.inner = h.inner.WithAttrs(as)
	return &h2
}

func (h *filterHandler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.inner = h.inner.WithGroup(name)
	return &h2
}

// subsysOf reads a SubsysKey value: a Subsys, or a string in
// NCCL_DEBUG_SUBSYS's grammar. Anything else counts as every subsystem.
func subsysOf(v slog.Value) Subsys {
	v = v.Resolve()
	switch x := v.Any().(type) {
	case Subsys:
		return x
	case string:
		if s, err := ParseSubsys(strings.ReplaceAll(x, "|", ",")); err == nil {
			return s
		}
	}
	return SubsysAll
}

// NewNCCLHandler returns a handler that writes records in NCCL's line
// format (see NewLogger), without any filtering beyond slog's Info default
// being absent: it writes every record it is given.
func NewNCCLHandler(w io.Writer) slog.Handler {
	host, _ := os.Hostname()
	if i := strings.IndexByte(host, '.'); i > 0 {
		host = host[:i]
	}
	return &ncclHandler{out: &lockedWriter{w: w}, prefix: host + ":" + strconv.Itoa(os.Getpid()), dev: "-"}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

type ncclHandler struct {
	out    *lockedWriter
	prefix string
	dev    string
	attrs  string // pre-formatted bound attributes
	group  string // current group prefix, "a.b."
}

func (h *ncclHandler) Enabled(context.Context, slog.Level) bool { return true }

func levelWord(l slog.Level) string {
	switch {
	case l >= slog.LevelWarn:
		return "WARN"
	case l >= slog.LevelInfo:
		return "INFO"
	}
	return "TRACE"
}

func (h *ncclHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if r.Level >= LevelVersion {
		b.WriteString(r.Message) // NCCL prints the version line bare
	} else {
		dev := h.dev
		var tail strings.Builder
		r.Attrs(func(a slog.Attr) bool {
			if h.group == "" && (a.Key == "dev" || a.Key == "rank") {
				dev = a.Value.Resolve().String()
			}
			appendAttr(&tail, h.group, a)
			return true
		})
		b.WriteString(h.prefix)
		b.WriteString(" [")
		b.WriteString(dev)
		b.WriteString("] NCCL ")
		b.WriteString(levelWord(r.Level))
		b.WriteByte(' ')
		b.WriteString(r.Message)
		b.WriteString(h.attrs)
		b.WriteString(tail.String())
	}
	b.WriteByte('\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := io.WriteString(h.out.w, b.String())
	return err
}

func (h *ncclHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		if h.group == "" && (a.Key == "dev" || a.Key == "rank") {
			h2.dev = a.Value.Resolve().String()
		}
		appendAttr(&b, h.group, a)
	}
	h2.attrs = b.String()
	return &h2
}

func (h *ncclHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.group = h.group + name + "."
	return &h2
}

func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, x := range v.Group() {
			appendAttr(b, g, x)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(group)
	b.WriteString(a.Key)
	b.WriteByte('=')
	s := v.String()
	if s == "" || strings.ContainsAny(s, " =\"\n\t") {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}
