package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/transport/ipc"
)

// Group is a job's control channel, on the CPU beside the communicators
// the job measures: a bootstrap network of its ranks for small exchanges
// (a library's unique id, each rank's results) and a liveness watch that
// notices a rank whose process ends before it left the group.
//
// A rank that finishes calls Close, which says goodbye to the others. A
// rank that fails should exit without Close: its peers then see it lost,
// their Context ends with a *LostError naming it, and their blocked
// exchanges return that error.
type Group struct {
	place Place
	conn  *bootstrap.Conn
	root  *bootstrap.Root // the root this process started, if any
	watch *ipc.Watcher

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	pids []int // every rank's process id, once exchanged
}

// LostError reports a rank whose process ended before it left the group
// (it crashed, was killed, or exited after an error of its own).
type LostError struct {
	Rank int
	PID  int // 0 when the rank died before the ids were exchanged
}

func (e *LostError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("rank %d exited before the job finished", e.Rank)
	}
	return fmt.Sprintf("rank %d (pid %d) exited before the job finished", e.Rank, e.PID)
}

// ErrLeft is the Context cause of a group that Close ended.
var ErrLeft = errors.New("launch: left the group")

// NewRoot starts the bootstrap root of a job's Group in this process (the
// launcher's, for Spawn's id argument) and returns the id in text form.
// The root stops once every rank has joined, after the bootstrap timeout,
// when ctx ends, or at stop.
func NewRoot(ctx context.Context) (id string, stop func(), err error) {
	r, uid, err := bootstrap.NewRoot(ctx, bootstrap.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("launch: starting the job's bootstrap root: %w", err)
	}
	return uid.String(), func() { _ = r.Close() }, nil
}

// Join makes this process rank p.Rank of the job's group. The group's
// bootstrap id is the one Spawn passed (NewRoot's), else rank 0 starts a
// root and hands its id to the others through ShareID. Join returns once
// every rank has joined and watches every other; it fails after the
// bootstrap timeout (NCCL_BOOTSTRAP_TIMEOUT, 120 s by default) naming the
// ranks that never came, or, when no id reaches it in that time, saying
// so.
func Join(ctx context.Context, p Place, getenv func(string) string) (_ *Group, err error) {
	g := &Group{place: p}
	defer func() {
		if err != nil {
			g.shut(err)
		}
	}()
	// The id's wait is bounded like the bootstrap's own: a rank 0 that
	// never publishes one must not hold the others forever.
	wait, err := idTimeout(getenv)
	if err != nil {
		return nil, err
	}
	idCtx, cancel := context.WithTimeoutCause(ctx, wait,
		fmt.Errorf("launch: rank %d: the job's id was not shared within the bootstrap timeout %v (NCCL_BOOTSTRAP_TIMEOUT)", p.Rank, wait))
	defer cancel()
	id, err := ShareID(idCtx, p, getenv, func() (string, error) {
		// The root outlives ShareID's ctx: the others check in later.
		r, uid, err := bootstrap.NewRoot(context.Background(), bootstrap.Options{})
		if err != nil {
			return "", fmt.Errorf("launch: rank 0: starting the job's bootstrap root: %w", err)
		}
		g.root = r
		return uid.String(), nil
	})
	if err != nil {
		return nil, err
	}
	uid, err := bootstrap.ParseUniqueID(id)
	if err != nil {
		return nil, fmt.Errorf("launch: the job's id %q: %w", id, err)
	}
	if g.conn, err = bootstrap.Init(ctx, uid, p.Rank, p.Size, bootstrap.Options{}); err != nil {
		return nil, fmt.Errorf("launch: rank %d: joining the job: %w", p.Rank, err)
	}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	if g.watch, err = ipc.NewWatcher(p.Rank, p.Size, g.lost); err != nil {
		return nil, err
	}
	blocks, err := g.conn.AllGather(ctx, []byte(strconv.Itoa(os.Getpid())+" "+g.watch.Addr()))
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d: exchanging process ids: %w", p.Rank, err)
	}
	pids := make([]int, p.Size)
	names := make([]string, p.Size)
	for r, b := range blocks {
		pid, name, ok := strings.Cut(string(b), " ")
		if pids[r], err = strconv.Atoi(pid); !ok || err != nil {
			return nil, fmt.Errorf("launch: rank %d: malformed liveness address from rank %d: %q", p.Rank, r, b)
		}
		names[r] = name
	}
	g.mu.Lock()
	g.pids = pids
	g.mu.Unlock()
	for r := p.Rank + 1; r < p.Size; r++ {
		if err := g.watch.Dial(ctx, r, names[r]); err != nil {
			return nil, err
		}
	}
	// Once past this, every pair of ranks watches each other, and every
	// rank has read the id: rank 0 removes the file that carried it, which
	// a later job of the same name must not find.
	if err := g.conn.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("launch: rank %d: waiting for every rank to watch the others: %w", p.Rank, err)
	}
	if f := idFile(p, getenv); f != "" && p.Rank == 0 {
		_ = os.Remove(f)
	}
	return g, nil
}

// idTimeout is the bootstrap timeout: NCCL_BOOTSTRAP_TIMEOUT (seconds)
// read through getenv, else bootstrap.DefaultTimeout.
func idTimeout(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv("NCCL_BOOTSTRAP_TIMEOUT"))
	if v == "" {
		return bootstrap.DefaultTimeout, nil
	}
	d, err := config.ParseBootstrapTimeout(v)
	if err != nil {
		return 0, fmt.Errorf("launch: %w", err)
	}
	return d, nil
}

// lost ends the group's context with a LostError for rank r.
func (g *Group) lost(r int) {
	e := &LostError{Rank: r}
	g.mu.Lock()
	if r < len(g.pids) {
		e.PID = g.pids[r]
	}
	g.mu.Unlock()
	g.cancel(e)
}

// Rank is this process's rank; Size the number of ranks.
func (g *Group) Rank() int { return g.place.Rank }

// Size is the number of ranks in the job.
func (g *Group) Size() int { return g.place.Size }

// Place is where this process sits in the job.
func (g *Group) Place() Place { return g.place }

// Context ends when another rank is lost (cause: a *LostError) or at Close
// (cause: ErrLeft).
func (g *Group) Context() context.Context { return g.ctx }

// Err is the *LostError of the first rank lost, or nil.
func (g *Group) Err() error {
	var le *LostError
	if errors.As(context.Cause(g.ctx), &le) {
		return le
	}
	return nil
}

// lostGrace bounds how long a failed exchange waits for the liveness watch
// to name the rank behind it (the bootstrap may notice a closed socket
// first).
const lostGrace = time.Second

// AllGather hands every rank's mine to every rank, in rank order. It fails
// with a *LostError when a rank is lost before it completes.
func (g *Group) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(g.ctx, func() { cancel(context.Cause(g.ctx)) })
	defer stop()
	out, err := g.conn.AllGather(ctx, mine)
	if err == nil {
		return out, nil
	}
	select {
	case <-g.ctx.Done():
	case <-time.After(lostGrace):
	}
	if le := g.Err(); le != nil {
		return nil, le
	}
	return nil, fmt.Errorf("launch: rank %d: exchange: %w", g.place.Rank, err)
}

// Barrier returns once every rank has called it.
func (g *Group) Barrier(ctx context.Context) error {
	_, err := g.AllGather(ctx, nil)
	return err
}

// Close leaves the group: it says goodbye to every other rank, so that
// none reports this one lost, and frees the sockets. Call it once every
// rank is done (after a Barrier).
func (g *Group) Close() error {
	g.shut(ErrLeft)
	return nil
}

func (g *Group) shut(cause error) {
	if g.watch != nil {
		_ = g.watch.Close()
	}
	if g.conn != nil {
		_ = g.conn.Close()
	}
	if g.root != nil {
		_ = g.root.Close()
	}
	if g.cancel != nil {
		g.cancel(cause)
	}
}
