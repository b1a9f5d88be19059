package enqueue

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Part is one rank's share of a multi-rank launch: the address of the
// rank's device communicator and the one launch of its plan.
type Part struct {
	Comm   uint64
	Launch *Launch
	// NRanks is the communicator's rank count: a launch whose parts are
	// all of its ranks may run in one pass (OnePass).
	NRanks int
}

// OnePassMaxBytes is the largest AllReduce, in bytes per rank, that a
// multi-rank launch runs in one pass (OnePass).
const OnePassMaxBytes = 1 << 20

// OnePass reports whether the multi-rank launch of parts (which CheckMulti
// accepted) can run in one pass (generated.ArgsOnePass): its parts are
// every rank of their communicator, in rank order, and each part is one
// AllReduce work on one channel, the whole call, of one count (at most
// OnePassMaxBytes), function, operation argument and flags. Then every
// rank's buffers are in the kernel arguments, and each block reduces its
// slice of every rank's input into every rank's output with no
// communication at all: one read of each input and one write of each
// output, where RING and DIRECT move the data through connection FIFOs or
// mailboxes and wait for each other.
func OnePass(parts []Part) bool {
	if _, ok := oneCallEach(parts); !ok {
		return false
	}
	for _, p := range parts {
		if len(p.Launch.Works) != 1 || p.Launch.Works[0].ChanOffset != 0 {
			return false
		}
	}
	return true
}

// oneCallEach reports whether parts are every rank of their communicator,
// each carrying one AllReduce call of one count (at most
// OnePassMaxBytes), function, operation argument and flags on every rank,
// split over its channels as one work per channel whose shares cover the
// call once, with both buffers given; w0 is part 0's first work. OnePass
// and onePassWide ask it first.
func oneCallEach(parts []Part) (w0 *generated.DevWork, ok bool) {
	if len(parts) < 2 || len(parts) != parts[0].NRanks {
		return nil, false
	}
	w0 = &parts[0].Launch.Works[0]
	for _, p := range parts {
		l := p.Launch
		if p.NRanks != len(parts) || l.Func.Coll != kspace.AllReduce || len(l.Works) == 0 || len(l.Works) != l.NBlocks() {
			return nil, false
		}
		first := &l.Works[0]
		var covered uint64
		for i := range l.Works {
			w := &l.Works[i]
			if w.Count != w0.Count || w.FuncId != w0.FuncId || w.RedOpArg != w0.RedOpArg || w.Flags != w0.Flags ||
				w.Sendbuff != first.Sendbuff || w.Recvbuff != first.Recvbuff || w.Sendbuff == 0 || w.Recvbuff == 0 {
				return nil, false
			}
			covered += w.ChanCount
		}
		if covered != w0.Count {
			return nil, false
		}
	}
	bytes := w0.Count * uint64(parts[0].Launch.Func.Type.Size())
	return w0, bytes > 0 && bytes <= OnePassMaxBytes
}

// onePassSliceBytes is how much of each rank's buffer a block of a wide
// one-pass launch (onePassWide) reduces at most: a 512-thread block moves
// it in one 8-byte line a thread.
const onePassSliceBytes = 4 << 10

// onePassWide returns the grid of a one-pass launch of parts through the
// kernel's one-pass entry (generated.ArgsOnePassEntry), and whether parts
// can run so: every rank of their communicator, each part one AllReduce
// call of one function, count, operation argument and flags on every
// rank, at most OnePassMaxBytes, whatever channels the tuner split it
// into (one work per channel, the shares covering the call once), through
// a kernel whose entry runs its op (onePassEntry; SumPostDiv on unsigned
// integers only). The entry reads nothing but the arguments and no block
// waits for another, so the grid is sized to the call, not to the parts'
// channels: one block per onePassSliceBytes of a rank's buffer, at least
// one per rank and at most generated.MaxChannels. Works whose buffers are
// window indices (generated.WorkDirectWin) do not qualify.
func onePassWide(parts []Part) (nBlocks int, ok bool) {
	w0, ok := oneCallEach(parts)
	if !ok || len(parts) > generated.LaunchMaxParts || w0.Flags&generated.WorkDirectWin != 0 {
		return 0, false
	}
	f := parts[0].Launch.Func
	if !onePassEntry(f) || (f.RedOp == kspace.SumPostDiv && !f.Type.IsInteger()) {
		return 0, false
	}
	for _, p := range parts {
		if p.Launch.Func != f {
			return 0, false
		}
	}
	bytes := w0.Count * uint64(f.Type.Size())
	slices := int((bytes + onePassSliceBytes - 1) / onePassSliceBytes)
	return min(generated.MaxChannels, max(len(parts), slices)), true
}

// putOnePassArgs writes the kernel arguments of the wide one-pass launch
// of parts (onePassWide) on nBlocks blocks into a and returns how many
// leading bytes of them the launch passes: works[p] is rank p's whole
// call, the flags ask for the one-pass entry with the call's op, and every
// block's slot is its own slice. The ngLaunchParts table follows the
// works as in any multi-rank launch, though the entry never reads it.
func putOnePassArgs(a *generated.KernelArgs, parts []Part, nBlocks int) int {
	var t generated.LaunchParts
	n := len(parts)
	for p, pt := range parts {
		t.Comms[p] = pt.Comm
		w := pt.Launch.Works[0]
		w.ChanOffset, w.ChanCount = 0, w.Count
		a.Works[p] = w
	}
	for v := range nBlocks {
		t.Chans[v] = uint16(v % n << 6)
	}
	for v := range a.ChanWorkStart {
		a.ChanWorkStart[v] = 0 // the entry runs no work loop
	}
	f := parts[0].Launch.Func
	a.Comm = 0
	a.ChannelMask = ^uint64(0) >> (64 - nBlocks)
	a.WorkBuf = 0
	a.NWork = uint32(n)
	a.NParts = uint32(n)
	a.Flags = generated.ArgsOnePass | generated.ArgsOnePassEntry | uint16(f.RedOp)<<generated.ArgsRedopShift
	a.Pad2 = [len(a.Pad2)]uint16{}
	*(*generated.LaunchParts)(unsafe.Pointer(&a.Works[n])) = t
	size := argsHeaderSize + (n+partsSlots)*int(unsafe.Sizeof(generated.DevWork{}))
	return min(KernelArgsSize, (size+15)&^15)
}

// partsSlots is how many inline work slots the ngLaunchParts table of a
// multi-rank launch takes.
const partsSlots = (int(unsafe.Sizeof(generated.LaunchParts{})) + int(unsafe.Sizeof(generated.DevWork{})) - 1) /
	int(unsafe.Sizeof(generated.DevWork{}))

// MaxMultiWorks is the most works, all ranks together, a multi-rank launch
// carries: they are inline, followed by the ngLaunchParts table.
const MaxMultiWorks = generated.WorkInlineMax - partsSlots

// CheckMulti reports whether parts can run as one multi-rank launch (see
// generated.KernelArgs): at least two and at most generated.LaunchMaxParts
// of them, with one kernel and one block size, every part's works inline,
// at most generated.MaxChannels blocks and MaxMultiWorks works in all. The
// error says which condition fails; the caller then launches the parts one
// by one.
func CheckMulti(parts []Part) error {
	if len(parts) < 2 || len(parts) > generated.LaunchMaxParts {
		return fmt.Errorf("enqueue: multi-rank launch of %d ranks: want 2..%d", len(parts), generated.LaunchMaxParts)
	}
	first := parts[0].Launch
	blocks, works := 0, 0
	for i, p := range parts {
		l := p.Launch
		if l.Kernel != first.Kernel || l.NThreads != first.NThreads {
			return fmt.Errorf("enqueue: multi-rank launch: part %d runs %s with %d threads, part 0 %s with %d",
				i, l.Func, l.NThreads, first.Func, first.NThreads)
		}
		if !l.Inline() {
			return fmt.Errorf("enqueue: multi-rank launch: part %d has %d works, more than fit inline (%d)", i, len(l.Works), generated.WorkInlineMax)
		}
		blocks += l.NBlocks()
		works += len(l.Works)
	}
	if blocks > generated.MaxChannels {
		return fmt.Errorf("enqueue: multi-rank launch: %d blocks in all, want at most %d", blocks, generated.MaxChannels)
	}
	if works > MaxMultiWorks {
		return fmt.Errorf("enqueue: multi-rank launch: %d works in all, want at most %d", works, MaxMultiWorks)
	}
	return nil
}

// PutMultiArgs writes the kernel arguments of the multi-rank launch of
// parts (which CheckMulti accepted) into a and returns how many leading
// bytes of them the launch passes and its grid size. Slots are numbered
// part by part, each part's channels in increasing order; slot v's works
// are its channel's works of that part.
func PutMultiArgs(a *generated.KernelArgs, parts []Part) (size, nBlocks int) {
	var t generated.LaunchParts
	w := 0
	for pi, p := range parts {
		l := p.Launch
		t.Comms[pi] = p.Comm
		for m := l.ChannelMask; m != 0; m &= m - 1 {
			c := bits.TrailingZeros64(m)
			a.ChanWorkStart[nBlocks] = uint16(w)
			t.Chans[nBlocks] = uint16(pi<<6 | c)
			w += copy(a.Works[w:], l.Works[l.ChanWorkStart[c]:l.ChanWorkStart[c+1]])
			nBlocks++
		}
	}
	for v := nBlocks; v <= generated.MaxChannels; v++ {
		a.ChanWorkStart[v] = uint16(w)
	}
	a.Comm = 0
	a.ChannelMask = ^uint64(0) >> (64 - nBlocks)
	a.WorkBuf = 0
	a.NWork = uint32(w)
	a.NParts = uint32(len(parts))
	a.Flags = 0
	a.Pad2 = [len(a.Pad2)]uint16{}
	*(*generated.LaunchParts)(unsafe.Pointer(&a.Works[w])) = t
	n := argsHeaderSize + (w+partsSlots)*int(unsafe.Sizeof(generated.DevWork{}))
	return min(KernelArgsSize, (n+15)&^15), nBlocks
}

// putMulti writes the kernel arguments of the multi-rank launch of parts
// (which CheckMulti accepted), queued on a stream of capture state c, into
// a and returns how many leading bytes the launch passes and its grid:
// a wide one-pass launch where OnePassAllReduce is on and onePassWide
// accepts parts, else PutMultiArgs' with the one-pass flags setOnePass
// adds; either marked to start the next kernel early as setMultiTrigger
// says, a wide grid only when it has no more blocks than the parts
// together (the residency budget the early start counts on).
func (l *Launcher) putMulti(a *generated.KernelArgs, parts []Part, c Capture) (size, nBlocks int) {
	if l.OnePassAllReduce {
		if k, ok := onePassWide(parts); ok {
			size = putOnePassArgs(a, parts, k)
			blocks := 0
			for _, p := range parts {
				blocks += p.Launch.NBlocks()
			}
			if k <= blocks {
				l.setMultiTrigger(a, parts, c)
			}
			return size, k
		}
	}
	size, nBlocks = PutMultiArgs(a, parts)
	l.setMultiTrigger(a, parts, c)
	l.setOnePass(a, parts)
	return size, nBlocks
}

// Comm returns the address of the device communicator the launcher's
// launches serve.
func (l *Launcher) Comm() uint64 { return l.comm }

// RunMulti queues the multi-rank launch of parts (which CheckMulti
// accepted) on s, with the kernel of the first part's function. It queues
// no copy: the parts' plans must have none.
func (l *Launcher) RunMulti(parts []Part, s *cuda.Stream) error { return l.RunMultiIn(parts, s, false) }

// RunMultiIn is RunMulti on a stream of capture state c. Every work of a
// multi-rank launch is in its kernel arguments, which a captured launch
// keeps in its graph node: a replay reads no memory that a later launch
// reuses.
func (l *Launcher) RunMultiIn(parts []Part, s *cuda.Stream, c Capture) error {
	first := parts[0].Launch
	fn, err := l.kernels(first.Func)
	if err != nil {
		return fmt.Errorf("enqueue: kernel for %s: %w", first.Func, err)
	}
	l.argsMu.Lock()
	defer l.argsMu.Unlock()
	if l.args == nil {
		l.args = new(generated.KernelArgs)
	}
	size, nBlocks := l.putMulti(l.args, parts, c)
	if err := l.streamLaunch(s, fn, cuda.Dim1(uint32(nBlocks)), cuda.Dim1(uint32(first.NThreads)), argBytes(l.args, size), c); err != nil {
		return fmt.Errorf("enqueue: %s multi-rank launch of %s for %d ranks (%d blocks × %d threads, %d works): %w",
			c, first.Func, len(parts), nBlocks, first.NThreads, l.args.NWork, err)
	}
	return nil
}
