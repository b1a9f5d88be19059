package nvbuild

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress reports a build. On a terminal it redraws one status line with
// \r; otherwise it writes one line per finished step.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	start   time.Time
	total   int
	done    int
	phase   string
	slowest string
	slowDur time.Duration
	drawn   bool
	stop    chan struct{}
	stopped chan struct{}
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newProgress(w io.Writer, start time.Time) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, tty: isTerminal(w), start: start}
}

// begin starts counting total compile steps; on a terminal it also starts
// a ticker so the elapsed time moves during long compiles.
func (p *progress) begin(total int) {
	p.mu.Lock()
	p.total = total
	p.phase = "compiling"
	p.mu.Unlock()
	if !p.tty || total == 0 {
		return
	}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.redrawLocked()
				p.mu.Unlock()
			}
		}
	}()
}

// end stops the ticker and clears the status line.
func (p *progress) end() {
	if p.stop != nil {
		close(p.stop)
		<-p.stopped
		p.stop = nil
	}
	p.mu.Lock()
	p.clearLocked()
	p.mu.Unlock()
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, format, args...)
	p.redrawLocked()
}

func (p *progress) compiled(file, target string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if d > p.slowDur {
		p.slowDur, p.slowest = d, file+" "+target
	}
	if p.tty {
		p.redrawLocked()
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] compiled %s %s (%s)\n", p.done, p.total, file, target, fmtDur(d))
}

func (p *progress) setPhase(s string) {
	p.mu.Lock()
	p.phase = s
	p.redrawLocked()
	p.mu.Unlock()
}

// step reports a link or pack step (plain lines in both modes: there are few).
func (p *progress) step(format string, args ...any) {
	p.printf(format+"\n", args...)
}

func (p *progress) clearLocked() {
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

func (p *progress) redrawLocked() {
	if !p.tty || p.total == 0 {
		return
	}
	const width = 24
	filled := width * p.done / p.total
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	line := fmt.Sprintf("[%s] %d/%d %s %s", bar, p.done, p.total, fmtClock(time.Since(p.start)), p.phase)
	if p.slowest != "" {
		line += fmt.Sprintf("  slowest: %s %s", p.slowest, fmtDur(p.slowDur))
	}
	if len(line) > 120 {
		line = line[:117] + "..."
	}
	fmt.Fprint(p.w, "\r\x1b[K"+line)
	p.drawn = true
}

func fmtDur(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func fmtClock(d time.Duration) string {
	s := int(d.Seconds())
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}

func fmtSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
