package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ncclgo/ncclgo/internal/envint"
)

// Conn is a connection that the engine drives.
type Conn interface {
	// Progress advances the connection without blocking; busy reports
	// whether it did anything. An error takes the connection out of the
	// engine. Progress runs on the engine's goroutine only, and must not
	// call the engine's methods.
	Progress() (busy bool, err error)
}

// The engine's idle policy. After a pass that did something it spins
// (SpinIdle: a step's data is usually right behind the one before), then
// sleeps NapIdle at a time on its own thread (a kernel sleep, with the
// thread's timer slack at 1 µs) until it has been idle for DozeAfter, and
// only then sleeps up to MaxIdle between passes (woken early by Add).
// So a connection that just worked answers in microseconds, and an idle
// process costs one pass per MaxIdle.
//
// SpinIdle and NapIdle are defaults: NCCLGO_NET_PROXY_SPIN_US and
// NCCLGO_NET_PROXY_NAP_US (EnvPolicy) set them for the process's engines.
const (
	SpinIdle  = 200 * time.Microsecond
	NapIdle   = 20 * time.Microsecond
	DozeAfter = 20 * time.Millisecond
	MaxIdle   = time.Millisecond
)

// Policy is an engine's idle policy: how long it spins after a busy pass,
// and how long each nap lasts after that (until DozeAfter).
type Policy struct {
	Spin, Nap time.Duration
}

// DefaultPolicy is SpinIdle and NapIdle.
var DefaultPolicy = Policy{Spin: SpinIdle, Nap: NapIdle}

// Limits of the policy's variables, in microseconds.
const (
	maxSpinUS = 1_000_000
	maxNapUS  = 1_000
)

// PolicyFromEnv reads NCCLGO_NET_PROXY_SPIN_US (0..1000000, default 200)
// and NCCLGO_NET_PROXY_NAP_US (1..1000, default 20) through getenv; an
// ill-formed or out-of-range value is an error naming the variable, its
// value and the valid range.
func PolicyFromEnv(getenv func(string) string) (Policy, error) {
	p := DefaultPolicy
	for _, v := range []struct {
		name     string
		dst      *time.Duration
		min, max int
		def      time.Duration
	}{
		{"NCCLGO_NET_PROXY_SPIN_US", &p.Spin, 0, maxSpinUS, SpinIdle},
		{"NCCLGO_NET_PROXY_NAP_US", &p.Nap, 1, maxNapUS, NapIdle},
	} {
		n, ok, err := envint.Get(getenv, v.name, "microseconds", v.min, v.max)
		if err != nil {
			return DefaultPolicy, fmt.Errorf("proxy: %w (default %d)", err, v.def.Microseconds())
		}
		if ok {
			*v.dst = time.Duration(n) * time.Microsecond
		}
	}
	return p, nil
}

var envPolicy struct {
	once sync.Once
	p    Policy
	err  error
}

// EnvPolicy is PolicyFromEnv of the process's environment, read once; the
// process's engine (Acquire) runs with it, or with DefaultPolicy when it
// is in error (whoever configures connections reports the error).
func EnvPolicy() (Policy, error) {
	envPolicy.once.Do(func() { envPolicy.p, envPolicy.err = PolicyFromEnv(os.Getenv) })
	return envPolicy.p, envPolicy.err
}

// yieldEvery is how often (in idle passes) a spinning engine yields its P
// to other goroutines, in a process of at most yieldMaxProcs Ps. With
// more it never yields while it spins (the runtime still preempts it
// every 10 ms when others wait): the engine's goroutine is locked to its
// thread, so a runtime.Gosched hands its P to another thread and waits
// for a thread to hand it back, two thread wakeups during which no
// connection is looked at (7.7 µs on the 2-core dev box against 0.2 µs
// for an unlocked goroutine, BenchmarkGoschedLocked), every 64 passes.
const (
	yieldEvery    = 64
	yieldMaxProcs = 2
)

// ErrStopped is returned by Add on an engine that was released.
var ErrStopped = errors.New("proxy: engine stopped")

// Engine drives connections; see the package documentation.
type Engine struct {
	mu      sync.Mutex
	entries []*entry
	refs    int
	stopped bool
	wake    chan struct{}
	done    chan struct{}
	yields  atomic.Int64 // Gosched calls while spinning (tests)
	policy  Policy

	// pass is held for each pass over the connections: Remove takes it
	// to wait for the pass that may still touch a removed connection.
	pass sync.Mutex
}

type entry struct {
	conn    Conn
	owner   any
	ctx     context.Context
	onError func(error)
	removed atomic.Bool
	err     error // set on the engine's goroutine, read after removal
	failed  bool
}

// New starts an engine of its own (tests, or a caller that wants one
// apart from the process's) with DefaultPolicy; Release stops it.
func New() *Engine { return NewWithPolicy(DefaultPolicy) }

// NewWithPolicy is New with the idle policy p.
func NewWithPolicy(p Policy) *Engine {
	e := &Engine{refs: 1, wake: make(chan struct{}, 1), done: make(chan struct{}), policy: p}
	go e.run()
	return e
}

var global struct {
	mu sync.Mutex
	e  *Engine
}

// Acquire returns the process's engine, starting it if no one holds it.
// Every Acquire needs one Release.
func Acquire() *Engine {
	global.mu.Lock()
	defer global.mu.Unlock()
	if global.e == nil {
		p, _ := EnvPolicy()
		global.e = NewWithPolicy(p)
		return global.e
	}
	global.e.mu.Lock()
	global.e.refs++
	global.e.mu.Unlock()
	return global.e
}

// Running reports whether the process's engine runs.
func Running() bool {
	global.mu.Lock()
	defer global.mu.Unlock()
	return global.e != nil
}

// Release drops a reference; the last one stops the engine and returns
// once its goroutine has exited (connections still added are no longer
// touched).
func (e *Engine) Release() {
	global.mu.Lock()
	defer global.mu.Unlock()
	e.mu.Lock()
	if e.refs == 0 {
		e.mu.Unlock()
		return
	}
	e.refs--
	last := e.refs == 0
	if last {
		e.stopped = true
		if global.e == e {
			global.e = nil
		}
	}
	e.mu.Unlock()
	if last {
		e.poke()
		<-e.done
	}
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Add starts driving c on behalf of owner (any comparable value: the
// communicator). When ctx is done, c leaves the engine with ctx's error.
// onError (may be nil) is called once, on the engine's goroutine and
// outside any pass, when c fails or its context ends; it may call Remove
// or Detach.
func (e *Engine) Add(ctx context.Context, owner any, c Conn, onError func(error)) error {
	if c == nil {
		return fmt.Errorf("proxy: Add of a nil connection")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return ErrStopped
	}
	for _, en := range e.entries {
		if en.conn == c {
			return fmt.Errorf("proxy: connection %v added twice", c)
		}
	}
	e.entries = append(e.entries, &entry{conn: c, owner: owner, ctx: ctx, onError: onError})
	e.poke()
	return nil
}

// Len is the number of connections in the engine (failed ones included
// until they are removed).
func (e *Engine) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.entries)
}

// Remove takes c out of the engine and returns once the engine no longer
// touches it, with the error that c failed with, if any. Removing a
// connection that is not in the engine is a no-op. Never call it from
// Progress.
func (e *Engine) Remove(c Conn) error {
	return e.remove(func(en *entry) bool { return en.conn == c })
}

// Detach removes every connection of owner, as Remove does, and returns
// their errors joined.
func (e *Engine) Detach(owner any) error {
	return e.remove(func(en *entry) bool { return en.owner == owner })
}

func (e *Engine) remove(match func(*entry) bool) error {
	e.mu.Lock()
	var gone []*entry
	kept := e.entries[:0]
	for _, en := range e.entries {
		if match(en) {
			en.removed.Store(true)
			gone = append(gone, en)
		} else {
			kept = append(kept, en)
		}
	}
	clear(e.entries[len(kept):])
	e.entries = kept
	e.mu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	// The pass in flight may hold one of them; the next ones will not.
	e.pass.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the pass is the point
	e.pass.Unlock()
	var errs []error
	for _, en := range gone {
		errs = append(errs, en.err)
	}
	return errors.Join(errs...)
}

// run is the engine's goroutine.
func (e *Engine) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(e.done)
	var snapshot []*entry
	var failed []*entry
	idle := 0
	var lastBusy time.Time
	setTimerSlack()
	yield := runtime.GOMAXPROCS(0) <= yieldMaxProcs
	for {
		e.mu.Lock()
		if e.stopped {
			e.mu.Unlock()
			return
		}
		snapshot = append(snapshot[:0], e.entries...)
		e.mu.Unlock()
		if len(snapshot) == 0 {
			<-e.wake
			continue
		}
		busy := false
		e.pass.Lock()
		for _, en := range snapshot {
			busy = e.step(en, &failed) || busy
		}
		e.pass.Unlock()
		for _, en := range failed {
			if en.onError != nil && !en.removed.Load() {
				en.onError(en.err)
			}
		}
		clear(snapshot)
		failed = failed[:0]
		if busy {
			idle, lastBusy = 0, time.Time{}
			continue
		}
		if idle++; idle == 1 {
			lastBusy = time.Now()
			continue
		}
		since := time.Since(lastBusy)
		switch {
		case since < e.policy.Spin:
			if yield && idle%yieldEvery == 0 {
				e.yields.Add(1)
				runtime.Gosched()
			}
		case since < DozeAfter:
			nap(e.policy.Nap)
		default:
			t := time.NewTimer(MaxIdle)
			select {
			case <-e.wake:
				idle, lastBusy = 0, time.Time{}
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// step runs en's Progress unless en is out, and records a failure (its
// error or its context's end) in *failed.
func (e *Engine) step(en *entry, failed *[]*entry) bool {
	if en.failed || en.removed.Load() {
		return false
	}
	if en.ctx != nil {
		if err := en.ctx.Err(); err != nil {
			en.err, en.failed = fmt.Errorf("proxy: connection %v: %w", en.conn, context.Cause(en.ctx)), true
			*failed = append(*failed, en)
			return false
		}
	}
	b, err := en.conn.Progress()
	if err != nil {
		en.err, en.failed = err, true
		*failed = append(*failed, en)
	}
	return b
}

// setTimerSlack makes the engine's thread's short sleeps short: the
// default slack of 50 µs would more than double a NapIdle.
func setTimerSlack() {
	const prSetTimerslack = 29
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1000, 0)
}

// nap sleeps d on the calling (locked) thread.
func nap(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
