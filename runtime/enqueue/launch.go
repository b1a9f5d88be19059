package enqueue

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// KernelSource returns the kernel that runs a device function.
type KernelSource func(f kspace.Func) (*cuda.Function, error)

// Launcher runs plans of one rank on CUDA streams. It owns the work FIFOs
// of launches whose works do not fit in the kernel arguments: for eager
// launches a page-locked staging buffer and a device buffer each, reused
// once an event recorded after their launch has completed; for launches
// captured into a CUDA graph device memory written at capture and freed
// once the graph is destroyed, or at Close (see Capture). It is safe for
// concurrent use.
type Launcher struct {
	// Log, when set before the first launch, gets the launcher's debug
	// messages.
	Log *slog.Logger
	// Programmatic, when set before the first launch, makes every
	// collective kernel a programmatic dependent launch
	// (cuda.Stream.LaunchProgrammatic): it may start while the kernel
	// before it on its stream winds down, and waits (devicesrc's
	// ngKernelMain, PTX griddepcontrol.wait) once it has loaded its
	// communicator, channel and works, before it touches anything that
	// earlier work writes.
	Programmatic bool
	// TriggerEarlyBlocks, when set before the first launch, is the most
	// blocks per rank a programmatic kernel (Programmatic,
	// CapturedProgrammatic) may have for it to let the next kernel on
	// its stream start early (generated.ArgsTriggerEarly: as soon as
	// every block of this one has waited for the grids before it). Such a kernel and the next one can
	// be resident at once, so a rank then holds twice its blocks: the
	// caller sizes this so that twice every co-located rank's blocks fit
	// the GPU, and budgets TriggersEarly launches twice (0: never).
	TriggerEarlyBlocks int
	// CapturedProgrammatic, when set before the first launch, makes the
	// collective kernels queued on a stream being captured into a CUDA
	// graph programmatic even where Programmatic is not set (a replay
	// has no host launch path to slow down; see runtime/comm's
	// EnvProgrammatic).
	CapturedProgrammatic bool
	// LaunchGraphs, when set before the first launch, sends the plain
	// kernel launches queued on streams not being captured through a
	// launch graph (cuda.LaunchGraph), which costs the host less than
	// cuLaunchKernel. CUDA orders the launches of one graph after each
	// other whatever their streams: a launcher serves one rank, whose
	// launches are ordered anyway (runtime/comm orders a rank's launch
	// after its previous one on another stream).
	LaunchGraphs bool
	// JoinGraphs, when set before the first launch with LaunchGraphs,
	// lets a multi-rank launch's caller put the launch stream's waits for
	// the other ranks' streams and its completion record into the launch's
	// graph (MultiJoinGraph), which saves a driver call per wait and the
	// record's.
	JoinGraphs bool
	// OnePassAllReduce, when set before the first launch, runs the
	// multi-rank launches that OnePass accepts in one pass
	// (generated.ArgsOnePass).
	OnePassAllReduce bool

	ctx     *cuda.Context
	comm    uint64
	kernels KernelSource

	mu       sync.Mutex
	bufs     []*workBuf
	captured capturedFIFOs

	argsMu sync.Mutex
	args   *generated.KernelArgs // the kernel arguments of the launch being queued

	graphMu    sync.Mutex
	graph      *cuda.LaunchGraph   // LaunchGraphs' graph, made at the first launch
	graphErr   error               // why it could not be made: launches go the ordinary way
	joinGraphs []*cuda.LaunchGraph // JoinGraphs' graphs, the latest used first
	joinErr    error               // why a join graph could not be made: joins go on the streams
	closed     bool                // Close ran: no more graphs
}

// MaxJoinRanks is the most ranks a multi-rank launch joins.
const MaxJoinRanks = generated.LaunchMaxParts

// maxJoinGraphs bounds a launcher's join graphs: one per set of events
// its multi-rank launches wait for and record (a set of ranks on a set of
// streams); the least recently used goes when another is needed.
const maxJoinGraphs = 4

// MultiJoinGraph returns the join graph (cuda.NewJoinGraph) through which
// the multi-rank launch of parts (CheckMulti accepted them) waits for
// waits, launches and records record, made at its first use; nil when
// JoinGraphs or LaunchGraphs is off or a join graph could not be made
// (once: none is tried again): the caller then queues the waits and the
// record on the stream itself.
func (l *Launcher) MultiJoinGraph(parts []Part, waits []*cuda.Event, record *cuda.Event) *cuda.LaunchGraph {
	if !l.JoinGraphs || !l.LaunchGraphs {
		return nil
	}
	l.graphMu.Lock()
	defer l.graphMu.Unlock()
	if l.closed || l.joinErr != nil {
		return nil
	}
	for i, g := range l.joinGraphs {
		if g.Joins(waits, record) {
			copy(l.joinGraphs[1:i+1], l.joinGraphs[:i])
			l.joinGraphs[0] = g
			return g
		}
	}
	first := parts[0].Launch
	fn, err := l.kernels(first.Func)
	if err != nil {
		return nil // QueueMultiVia reports it
	}
	g, err := l.ctx.NewJoinGraph(fn, uint32(first.NBlocks()), uint32(first.NThreads), zeroArgs[:], waits, record)
	if err != nil {
		// Not asked again: a failure would cost every launch a graph's
		// making (and a log line).
		l.joinErr = err
		if l.Log != nil {
			l.Log.Info("ncclgo: multi-rank launches join their streams without a graph", "err", err)
		}
		return nil
	}
	if len(l.joinGraphs) == maxJoinGraphs {
		_ = l.joinGraphs[maxJoinGraphs-1].Destroy() // launches queued through it still run
		l.joinGraphs = l.joinGraphs[:maxJoinGraphs-1]
	}
	l.joinGraphs = append([]*cuda.LaunchGraph{g}, l.joinGraphs...)
	return g
}

// zeroArgs is the parameter block a launch graph's node starts with.
var zeroArgs [unsafe.Sizeof(generated.KernelArgs{})]byte

// GraphLaunches returns how many launches went through the launcher's
// launch graph (LaunchGraphs) and how many the driver would not put in it.
func (l *Launcher) GraphLaunches() (through, refused uint64) {
	l.graphMu.Lock()
	g := l.graph
	l.graphMu.Unlock()
	if g == nil {
		return 0, 0
	}
	return g.Launches()
}

// launchGraph returns the launch graph a launch of fn (grid × block) on a
// stream of capture state c goes through, or nil: under capture, for
// programmatic launches, when LaunchGraphs is off or no graph could be
// made (said once on Log).
func (l *Launcher) launchGraph(fn *cuda.Function, grid, block uint32, c Capture) *cuda.LaunchGraph {
	if !l.LaunchGraphs || bool(c) || l.programmatic(c) {
		return nil
	}
	l.graphMu.Lock()
	defer l.graphMu.Unlock()
	if l.graph == nil && l.graphErr == nil {
		l.graph, l.graphErr = l.ctx.NewLaunchGraph(fn, grid, block, zeroArgs[:])
		if l.graphErr != nil && l.Log != nil {
			l.Log.Info("ncclgo: kernels launch without a launch graph", "err", l.graphErr)
		}
	}
	return l.graph
}

type workBuf struct {
	host unsafe.Pointer
	dev  cuda.DevicePtr
	size uint64
	ev   *cuda.Event
	busy bool
}

// NewLauncher returns a launcher for the device communicator at comm in
// ctx, taking kernels from kernels.
func NewLauncher(ctx *cuda.Context, comm uint64, kernels KernelSource) *Launcher {
	return &Launcher{ctx: ctx, comm: comm, kernels: kernels}
}

// Run queues p on s: the copies, then every launch (with its work FIFO
// copy when needed), in order. It returns once everything is queued. It
// asks whether s is being captured (CaptureOf); RunIn takes the answer.
func (l *Launcher) Run(p *Plan, s *cuda.Stream) error {
	c, err := CaptureOf(s)
	if err != nil {
		return err
	}
	return l.RunIn(p, s, c)
}

// RunIn is Run on a stream whose capture state c is known.
func (l *Launcher) RunIn(p *Plan, s *cuda.Stream, c Capture) error {
	for _, cp := range p.Copies {
		if err := s.MemcpyDtoDAsync(cuda.DevicePtr(cp.Dst), cuda.DevicePtr(cp.Src), cp.Bytes); err != nil {
			return fmt.Errorf("enqueue: %s copy of %d bytes: %w", c, cp.Bytes, err)
		}
	}
	for i := range p.Launches {
		if err := l.launch(&p.Launches[i], s, c); err != nil {
			return err
		}
	}
	return nil
}

// Queue adds p's copies and launch on s to o, between what the caller
// added before and after, so that one call into
// the driver queues them all (cuda.Ops.Run; the caller runs it). Copies
// and the launch are flagged cuda.OpSkip: after a failure nothing more of
// the plan runs, as in RunIn. It reports false, adding nothing, for a plan
// that does not fit one sequence (more than one launch, or works that do
// not fit in the kernel arguments): RunIn queues those. first and last
// are the indexes of the plan's operations in o (first > last when the
// plan queues nothing). On a stream being captured they are what RunIn
// queues there too: copy nodes and a kernel node holding the works.
func (l *Launcher) Queue(p *Plan, s *cuda.Stream, o *cuda.Ops) (first, last int, ok bool, err error) {
	return l.QueueIn(p, s, o, false)
}

// QueueIn is Queue on a stream of capture state c.
func (l *Launcher) QueueIn(p *Plan, s *cuda.Stream, o *cuda.Ops, c Capture) (first, last int, ok bool, err error) {
	if len(p.Launches) > 1 || len(p.Launches) == 1 && !p.Launches[0].Inline() {
		return 0, 0, false, nil
	}
	first = o.Len()
	for _, cp := range p.Copies {
		if cp.Bytes > 0 {
			o.MemcpyDtoDAsync(s, cuda.DevicePtr(cp.Dst), cuda.DevicePtr(cp.Src), cp.Bytes, cuda.OpSkip)
		}
	}
	if len(p.Launches) == 1 {
		ln := &p.Launches[0]
		fn, err := l.kernels(ln.Func)
		if err != nil {
			return 0, 0, false, fmt.Errorf("enqueue: kernel for %s: %w", ln.Func, err)
		}
		n := ln.ArgsSize()
		a := (*generated.KernelArgs)(o.Args(int(unsafe.Sizeof(generated.KernelArgs{}))))
		ln.PutArgs(a, l.comm, 0)
		l.setTrigger(a, ln.NBlocks(), c)
		o.Args(n)
		l.queueLaunch(o, s, fn, uint32(ln.NBlocks()), uint32(ln.NThreads), cuda.OpSkip, c)
	}
	return first, o.Len() - 1, true, nil
}

// QueueErr is the error of the plan's operations first..last of o (Queue)
// after o ran, worded as RunIn's on a stream of capture state c.
func QueueErr(p *Plan, o *cuda.Ops, first, last int, c Capture) error {
	for i := first; i <= last; i++ {
		err := o.Err(i)
		if err == nil || errors.Is(err, cuda.ErrNotRun) {
			continue
		}
		if len(p.Launches) == 0 || i < last {
			k := first
			for _, cp := range p.Copies {
				if cp.Bytes == 0 {
					continue
				}
				if k == i {
					return fmt.Errorf("enqueue: %s copy of %d bytes: %w", c, cp.Bytes, err)
				}
				k++
			}
		}
		ln := &p.Launches[0]
		return fmt.Errorf("enqueue: %s launch of %s (%d blocks × %d threads, %d works): %w",
			c, ln.Func, ln.NBlocks(), ln.NThreads, len(ln.Works), err)
	}
	return nil
}

// QueueMulti adds the multi-rank launch of parts (RunMulti) on s to o,
// flagged f, and returns its index in o.
func (l *Launcher) QueueMulti(parts []Part, s *cuda.Stream, o *cuda.Ops, f cuda.OpFlag) (int, error) {
	return l.QueueMultiVia(parts, s, o, f, nil)
}

// QueueMultiVia is QueueMulti through the join graph g (MultiJoinGraph),
// or, when g is nil, as QueueMulti.
func (l *Launcher) QueueMultiVia(parts []Part, s *cuda.Stream, o *cuda.Ops, f cuda.OpFlag, g *cuda.LaunchGraph) (int, error) {
	first := parts[0].Launch
	fn, err := l.kernels(first.Func)
	if err != nil {
		return 0, fmt.Errorf("enqueue: kernel for %s: %w", first.Func, err)
	}
	a := (*generated.KernelArgs)(o.Args(int(unsafe.Sizeof(generated.KernelArgs{}))))
	size, nBlocks := l.putMulti(a, parts, false)
	o.Args(size)
	if g != nil {
		i := o.Launch(s, fn, uint32(nBlocks), uint32(first.NThreads), 0, f)
		o.Via(i, g)
		return i, nil
	}
	return l.queueLaunch(o, s, fn, uint32(nBlocks), uint32(first.NThreads), f, false), nil
}

// TriggersEarly reports whether a rank's eager kernel of nBlocks blocks
// lets the next one start early: the rank's resident blocks are then twice
// its own.
func (l *Launcher) TriggersEarly(nBlocks int) bool { return l.triggersEarly(nBlocks, false) }

// programmatic reports whether a collective kernel queued on a stream of
// capture state c is a programmatic launch.
func (l *Launcher) programmatic(c Capture) bool {
	return l.Programmatic || bool(c) && l.CapturedProgrammatic
}

// triggersEarly is TriggersEarly for a kernel queued on a stream of
// capture state c.
func (l *Launcher) triggersEarly(nBlocks int, c Capture) bool {
	return l.programmatic(c) && nBlocks > 0 && nBlocks <= l.TriggerEarlyBlocks
}

// setTrigger marks a's launch of nBlocks blocks as triggersEarly says.
func (l *Launcher) setTrigger(a *generated.KernelArgs, nBlocks int, c Capture) {
	if l.triggersEarly(nBlocks, c) {
		a.Flags |= generated.ArgsTriggerEarly
	}
}

// setMultiTrigger marks a's multi-rank launch of parts, queued on a
// stream of capture state c, when every part's kernel would trigger early
// on its own there (triggersEarly).
func (l *Launcher) setMultiTrigger(a *generated.KernelArgs, parts []Part, c Capture) {
	for _, p := range parts {
		if !l.triggersEarly(p.Launch.NBlocks(), c) {
			return
		}
	}
	a.Flags |= generated.ArgsTriggerEarly
}

// setOnePass marks a's multi-rank launch of parts to run in one pass
// where OnePassAllReduce allows it and OnePass accepts parts.
func (l *Launcher) setOnePass(a *generated.KernelArgs, parts []Part) {
	if !l.OnePassAllReduce || !OnePass(parts) {
		return
	}
	a.Flags |= generated.ArgsOnePass
	if f := parts[0].Launch.Func; onePassEntry(f) {
		a.Flags |= generated.ArgsOnePassEntry | uint16(f.RedOp)<<generated.ArgsRedopShift
	}
}

// onePassEntry reports whether a one-pass launch of AllReduce function f
// may go through its kernel's one-pass entry (generated.ArgsOnePassEntry):
// when f's type is its kernel's. An AllReduce function runs on its
// type's kernel, whatever its op, algorithm and protocol (kspace's
// preferred kernel; a generic kernel has no entry and runs the works
// through its table), but a signed type's on its unsigned twin's, whose
// entry would not compare signed (only NVLS MinMax keeps a signed type).
func onePassEntry(f kspace.Func) bool { return !f.Type.IsSigned() }

// queueLaunch adds the launch of a collective kernel on s, of capture
// state c, to o, programmatic as l.programmatic says, and returns its
// index.
func (l *Launcher) queueLaunch(o *cuda.Ops, s *cuda.Stream, fn *cuda.Function, grid, block uint32, f cuda.OpFlag, c Capture) int {
	i := o.Launch(s, fn, grid, block, 0, f)
	if l.programmatic(c) {
		o.Programmatic(i)
	} else if g := l.launchGraph(fn, grid, block, c); g != nil {
		o.Via(i, g)
	}
	return i
}

// streamLaunch launches a collective kernel on s, of capture state c, now,
// programmatic as l.programmatic says.
func (l *Launcher) streamLaunch(s *cuda.Stream, fn *cuda.Function, grid, block cuda.Dim3, args []byte, c Capture) error {
	if l.programmatic(c) {
		return s.LaunchProgrammatic(fn, grid, block, 0, args)
	}
	return s.LaunchVia(l.launchGraph(fn, grid.X, block.X, c), fn, grid, block, 0, args)
}

func (l *Launcher) launch(ln *Launch, s *cuda.Stream, c Capture) error {
	fn, err := l.kernels(ln.Func)
	if err != nil {
		return fmt.Errorf("enqueue: kernel for %s: %w", ln.Func, err)
	}
	var wb *workBuf
	var wbAddr uint64
	if !ln.Inline() && bool(c) {
		// Under capture: no staging buffer (a replay would read it after
		// its reuse) and no event (a captured one cannot be queried).
		l.mu.Lock()
		p, err := l.putCaptured(WorkBytes(ln.Works), s)
		l.mu.Unlock()
		if err != nil {
			return fmt.Errorf("enqueue: captured launch of %s (%d works): %w", ln.Func, len(ln.Works), err)
		}
		wbAddr = uint64(p)
	} else if !ln.Inline() {
		b := WorkBytes(ln.Works)
		if wb, err = l.acquire(uint64(len(b))); err != nil {
			return err
		}
		copy(unsafe.Slice((*byte)(wb.host), len(b)), b)
		if err := s.MemcpyHtoDAsync(wb.dev, wb.host, uint64(len(b))); err != nil {
			l.release(wb)
			return fmt.Errorf("enqueue: work FIFO copy (%d works): %w", len(ln.Works), err)
		}
		wbAddr = uint64(wb.dev)
	}
	grid := cuda.Dim1(uint32(ln.NBlocks()))
	block := cuda.Dim1(uint32(ln.NThreads))
	// The arguments are written into one reused block (the driver copies
	// them during the launch).
	l.argsMu.Lock()
	if l.args == nil {
		l.args = new(generated.KernelArgs)
	}
	ln.PutArgs(l.args, l.comm, wbAddr)
	l.setTrigger(l.args, ln.NBlocks(), c)
	err = l.streamLaunch(s, fn, grid, block, argBytes(l.args, ln.ArgsSize()), c)
	l.argsMu.Unlock()
	if err != nil {
		if wb != nil {
			// The copy is queued; keep the buffer busy until it is done.
			_ = wb.ev.Record(s)
		}
		return fmt.Errorf("enqueue: %s launch of %s (%d blocks × %d threads, %d works): %w",
			c, ln.Func, ln.NBlocks(), ln.NThreads, len(ln.Works), err)
	}
	if wb != nil {
		if err := wb.ev.Record(s); err != nil {
			return fmt.Errorf("enqueue: recording the work FIFO's event: %w", err)
		}
	}
	return nil
}

// acquire returns an idle work buffer of at least n bytes, marked busy.
func (l *Launcher) acquire(n uint64) (*workBuf, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bufs {
		if b.size < n {
			continue
		}
		if b.busy {
			done, err := b.ev.Query()
			if err != nil || !done {
				continue
			}
		}
		b.busy = true
		return b, nil
	}
	size := uint64(64 << 10)
	for size < n {
		size *= 2
	}
	b := &workBuf{size: size, busy: true}
	var err error
	if b.host, err = l.ctx.MemAllocHost(size); err != nil {
		return nil, fmt.Errorf("enqueue: work FIFO staging (%d bytes): %w", size, err)
	}
	if b.dev, err = l.ctx.MemAlloc(size); err != nil {
		_ = l.ctx.MemFreeHost(b.host)
		return nil, fmt.Errorf("enqueue: work FIFO (%d bytes): %w", size, err)
	}
	if b.ev, err = l.ctx.NewEvent(true); err != nil {
		_ = l.ctx.MemFree(b.dev)
		_ = l.ctx.MemFreeHost(b.host)
		return nil, fmt.Errorf("enqueue: work FIFO event: %w", err)
	}
	l.bufs = append(l.bufs, b)
	return b, nil
}

func (l *Launcher) release(b *workBuf) {
	l.mu.Lock()
	b.busy = false
	l.mu.Unlock()
}

// Close waits for every eager work FIFO's last launch and frees them, and
// frees the work FIFOs of captured launches, whether their graphs were
// destroyed or not: no graph captured from this launcher may be launched
// afterwards. The launcher must not be used
// afterwards.
func (l *Launcher) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, b := range l.bufs {
		if b.busy {
			errs = append(errs, b.ev.Synchronize())
		}
		errs = append(errs, b.ev.Destroy(), l.ctx.MemFree(b.dev), l.ctx.MemFreeHost(b.host))
	}
	l.bufs = nil
	errs = append(errs, l.closeCaptured())
	l.graphMu.Lock()
	errs = append(errs, l.graph.Destroy())
	for _, g := range l.joinGraphs {
		errs = append(errs, g.Destroy())
	}
	l.graph, l.graphErr, l.joinGraphs, l.closed = nil, errors.New("enqueue: launcher closed"), nil, true
	l.graphMu.Unlock()
	return errors.Join(errs...)
}
