package enqueue

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// Granule is the alignment, in bytes, of the boundaries between the parts
// of one operation that different channels handle (the last part ends
// wherever the buffer does).
const Granule = 512

// P2PGranule is the alignment of the parts of a point-to-point operation.
const P2PGranule = 256

// MinBlockThreads is the smallest block a launch uses: the kernel's
// prologue (ngKernelMain) copies the communicator, the channel, the ring's
// connections and the first work with threads 0..103. Works that want
// fewer threads say so in nWarps.
const MinBlockThreads = 128

// MaxWorksPerLaunch bounds the works of one launch (chanWorkStart holds
// 16-bit indices).
const MaxWorksPerLaunch = 1<<16 - 1

// Task is one call of one rank, as the planner sees it.
type Task struct {
	// Coll is the collective, or kspace.SendRecv for Send and Recv.
	Coll kspace.Coll
	// Send and Recv are device addresses of the user buffers. A Send task
	// uses Send only, a Recv task Recv only.
	Send, Recv uint64
	// Bytes is the size of the call's buffer: the whole buffer for
	// AllReduce, Reduce and Broadcast, one rank's chunk for AllGather and
	// ReduceScatter (the whole buffer is NRanks of them), the message for
	// Send and Recv. It is a multiple of Type's size.
	Bytes uint64
	// Type is the element type of every task, Send and Recv included. The
	// planner derives the element counts the device needs from Bytes and
	// Type (see deviceUnits).
	Type kspace.Type
	// Op is the device reduction op, OpArg its argument (PreMulSum scalar
	// bits or pointer, SumPostDiv divisor, MinMax 1 for min), OpArgPtr
	// true when OpArg is a device pointer to the scalar.
	Op       kspace.RedOp
	OpArg    uint64
	OpArgPtr bool
	// Root is the root rank of Broadcast and Reduce.
	Root int
	// Peer is the peer of Send and Recv; IsSend tells them apart.
	Peer   int
	IsSend bool
	// Windows, for a collective whose buffers lie in registered windows
	// (runtime/comm's RegisterWindow): SendWin and RecvWin are their
	// window indices + 1 (0: none), and Choose, when not nil, picks for
	// this task instead of Build's Chooser (across processes all of
	// DIRECT runs on windows; without them only AllReduce's LL one-shot,
	// which needs no peer buffer). A DIRECT work of such a task carries
	// generated.WorkDirectWin and the indices in SendPeer and RecvPeer.
	// A Send whose buffer lies in a window has SendWin (Choose stays nil):
	// its works carry generated.WorkP2pSendWin and the index in Root, and
	// between processes the receiver copies from the window
	// (devicesrc/sendrecv.h); a Recv needs none.
	SendWin, RecvWin int32
	Choose           Chooser
}

// Comm is the planner's view of one rank's communicator.
type Comm struct {
	Rank, NRanks int
	// NChannels is the number of channels set up; no work lands on a
	// channel at or above it.
	NChannels int
	// P2PChannelsPerPeer is the number of channels the traffic between two
	// ranks at one distance spreads over (see P2PChannel).
	P2PChannelsPerPeer int
}

// Chooser picks how to run a call (tune.Tuner implements it).
type Chooser interface {
	Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, nBytes int64) (tune.Choice, error)
}

// FuncLookup returns a device function's id in the function table and the
// index of the kernel that runs it, or an error when the build lacks it.
type FuncLookup func(f kspace.Func) (funcID, kernel int, err error)

// GeneratedLookup is the FuncLookup of the generated tables: the row
// (kspace.RowOf) mapped through generated.RowToID. Functions left out of
// the build, and stubs without a device implementation, are errors.
func GeneratedLookup(f kspace.Func) (int, int, error) {
	row, ok := kspace.RowOf(f)
	if !ok || row >= len(generated.RowToID) || generated.RowToID[row] < 0 {
		return 0, 0, fmt.Errorf("enqueue: %s is not a valid device function", f)
	}
	id := int(generated.RowToID[row])
	info := generated.Funcs[id]
	if info.Func != kspace.Primary(f) {
		return 0, 0, fmt.Errorf("enqueue: %s is not in this build (filter %q)", f, generated.Filter)
	}
	if !info.Implemented {
		return 0, 0, fmt.Errorf("enqueue: %s has no device implementation", f)
	}
	return id, info.Kernel, nil
}

// Copy is a device-to-device copy that replaces a kernel (a send to and
// receive from oneself, or a collective over one rank).
type Copy struct {
	Dst, Src uint64
	Bytes    uint64
}

// Decision records how the planner runs one task, for logging.
type Decision struct {
	Coll      kspace.Coll
	Bytes     int64
	Choice    tune.Choice
	NChannels int // channels actually used
}

// Launch is one kernel launch of a plan.
type Launch struct {
	// Func is the function whose kernel to launch (the first work's; the
	// kernel runs the other works through the device function table), and
	// Kernel that kernel's index in generated.Kernels.
	Func   kspace.Func
	Kernel int
	// NThreads is the block size: the largest of the works' choices.
	NThreads int
	// ChannelMask has a bit per channel with works; the grid has one block
	// per bit.
	ChannelMask uint64
	// Works are sorted by channel; ChanWorkStart[c] is the first work of
	// channel c and ChanWorkStart[64] their number.
	Works         []generated.DevWork
	ChanWorkStart [generated.MaxChannels + 1]uint16
}

// NBlocks is the grid size: the number of channels with works.
func (l *Launch) NBlocks() int {
	n := 0
	for m := l.ChannelMask; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// Inline reports whether the works fit in the kernel arguments.
func (l *Launch) Inline() bool { return len(l.Works) <= generated.WorkInlineMax }

// PutArgs writes the first ArgsSize bytes of the kernel arguments for the
// device communicator comm into a, which may hold an earlier launch's:
// every header field is set and the inline works copied; what lies past
// them is left as it was, since the launch does not pass it. workBuf is the
// device copy of the works when they do not fit inline (ignored otherwise).
func (l *Launch) PutArgs(a *generated.KernelArgs, comm, workBuf uint64) {
	a.Comm = comm
	a.ChannelMask = l.ChannelMask
	a.WorkBuf = 0
	a.NWork = uint32(len(l.Works))
	a.NParts = 0
	a.ChanWorkStart = l.ChanWorkStart
	a.Flags = 0
	a.Pad2 = [len(a.Pad2)]uint16{}
	if l.Inline() {
		copy(a.Works[:], l.Works)
	} else {
		a.WorkBuf = workBuf
	}
}

// Plan is what one rank launches at the end of a group: copies first, then
// the launches in order, all on one stream.
type Plan struct {
	Copies    []Copy
	Launches  []Launch
	Decisions []Decision
}

// Empty reports whether the plan does nothing.
func (p *Plan) Empty() bool { return len(p.Copies) == 0 && len(p.Launches) == 0 }

// KernelArgsSize is the size of the packed kernel arguments.
const KernelArgsSize = int(unsafe.Sizeof(generated.KernelArgs{}))

// argsHeaderSize is the part of the kernel arguments before the inline works.
const argsHeaderSize = int(unsafe.Offsetof(generated.KernelArgs{}.Works))

// argBytes is the first n bytes of a as the kernel receives them
// (little-endian, the C layout), without a copy: the kernel arguments hold
// no Go pointers, so cgo may pass them as they are.
func argBytes(a *generated.KernelArgs, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), n)
}

// ArgsSize is how many leading bytes of the kernel arguments a launch must
// pass: the header and its inline works, rounded up to 16 bytes. The
// kernel reads no work at or past NWork, so the rest of the 4 KiB block
// need not be copied at launch (the driver copies what it is given; NCCL
// passes a partial block the same way). It cuts an 8-byte AllReduce's
// parameter copy from 4096 bytes to 256.
func (l *Launch) ArgsSize() int {
	n := argsHeaderSize
	if l.Inline() {
		n += len(l.Works) * int(unsafe.Sizeof(generated.DevWork{}))
	}
	return min(KernelArgsSize, (n+15)&^15)
}

// WorkBytes returns works' bytes as the device reads them.
func WorkBytes(works []generated.DevWork) []byte {
	if len(works) == 0 {
		return nil
	}
	n := len(works) * int(unsafe.Sizeof(generated.DevWork{}))
	b := make([]byte, n)
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&works[0])), n))
	return b
}

// ErrInvalidPlan is wrapped by Build's errors about tasks that cannot be
// planned (mismatched self send/receive, too many works).
var ErrInvalidPlan = errors.New("invalid operations")

// byteMoving reports whether the device counts a collective's works in
// bytes rather than elements.
func byteMoving(c kspace.Coll) bool {
	return c == kspace.Broadcast || c == kspace.AllGather || c == kspace.AllGatherV
}

// deviceUnits is t's size in the unit its works count in (DevWork.Count,
// ChanOffset, ChanCount): bytes for Send, Recv and the byte-moving
// collectives, elements of t.Type for the others; unit is the bytes of
// one. It is the only place the planner turns bytes into elements
// (validate has checked that t.Bytes is a whole number of them).
func deviceUnits(t Task) (n, unit uint64) {
	if t.Coll == kspace.SendRecv || byteMoving(t.Coll) {
		return t.Bytes, 1
	}
	es := uint64(t.Type.Size())
	return t.Bytes / es, es
}

// bufferBytes is the size of the whole buffer of t that the tuner sizes
// the call by: the larger of one rank's send and receive buffers
// (kspace.Coll.Extents; for AllGather and ReduceScatter, whose Bytes is one
// rank's chunk, NRanks chunks).
func bufferBytes(c Comm, t Task) uint64 {
	return max(t.Coll.Extents(t.Bytes, c.NRanks))
}

// split divides n units into at most k parts whose boundaries are
// multiples of granule units, none empty; part gives part i.
func split(n uint64, k int, granule uint64) (per uint64, parts int) {
	if n == 0 {
		return 0, 0
	}
	if granule == 0 {
		granule = 1
	}
	if maxParts := (n + granule - 1) / granule; uint64(k) > maxParts {
		k = int(maxParts)
	}
	k = max(k, 1)
	per = (n + uint64(k) - 1) / uint64(k)
	per = (per + granule - 1) / granule * granule
	return per, int((n + per - 1) / per)
}

// part is part i of n units split into parts of per: its offset and count.
func part(n, per uint64, i int) (off, count uint64) {
	off = uint64(i) * per
	return off, min(per, n-off)
}

// P2PChannel is the channel that part j of the traffic at distance d
// (1..nRanks-1) uses.
func P2PChannel(c Comm, d, j int) int {
	k := max(1, min(c.P2PChannelsPerPeer, c.NChannels))
	return ((d-1)*k + j%k) % c.NChannels
}

// P2PChannels lists the channels the traffic at distance d may use.
func P2PChannels(c Comm, d int) []int {
	k := max(1, min(c.P2PChannelsPerPeer, c.NChannels))
	var out []int
	for j := range k {
		ch := P2PChannel(c, d, j)
		if !slices.Contains(out, ch) {
			out = append(out, ch)
		}
	}
	return out
}

type chanWork struct {
	ch  int
	key [3]int // p2p (d, i, j); collectives use their order
	w   generated.DevWork
	nt  int
}

// Build plans the tasks of one rank. Collectives keep their order and come
// before point-to-point operations. It never launches anything.
//
// All the works of a group go into one launch (more only past
// MaxWorksPerLaunch works): its kernel runs the works of other functions
// through the device function table. A group is thus one kernel per rank,
// as in NCCL. Several launches per rank would make each rank's later
// launches wait on its earlier ones in stream order, and ranks that share
// a GPU would then depend on the GPU scheduling their streams' kernels
// side by side in a particular interleaving; with one launch per group the
// blocks of every co-located rank need only be resident at once, which the
// residency cap (runtime/tune) guarantees.
func Build(c Comm, tasks []Task, choose Chooser, lookup FuncLookup) (Plan, error) {
	var p Plan
	if c.NRanks < 1 || c.Rank < 0 || c.Rank >= c.NRanks {
		return p, fmt.Errorf("enqueue: %w: rank %d of %d", ErrInvalidPlan, c.Rank, c.NRanks)
	}
	if c.NChannels < 1 || c.NChannels > generated.MaxChannels {
		return p, fmt.Errorf("enqueue: %w: %d channels, want 1..%d", ErrInvalidPlan, c.NChannels, generated.MaxChannels)
	}
	if err := validate(c, tasks); err != nil {
		return p, err
	}
	if choose == nil && len(tasks) > 0 {
		return p, fmt.Errorf("enqueue: %w: nil Chooser for %d tasks (want a tuner, e.g. a *tune.Tuner)", ErrInvalidPlan, len(tasks))
	}
	if lookup == nil {
		lookup = GeneratedLookup
	}
	// Collectives, grouped into launches. The works of the launch being
	// filled are curWorks[start:]; planColl appends a task's works after
	// them, and they move to a new launch only when they do not fit.
	var cur Launch
	open := false
	var curWorks []chanWork
	start := 0
	flush := func(end int) {
		if open {
			finishLaunch(&cur, curWorks[start:end])
			p.Launches = append(p.Launches, cur)
			open, start = false, end
		}
	}
	var p2p []Task
	for ti, t := range tasks {
		if t.Coll == kspace.SendRecv {
			p2p = append(p2p, t)
			continue
		}
		before := len(curWorks)
		var dec Decision
		var cp *Copy
		var fn kspace.Func
		var err error
		curWorks, dec, cp, fn, err = planColl(c, t, choose, curWorks)
		if err != nil {
			return Plan{}, fmt.Errorf("enqueue: task %d (%s): %w", ti, t.Coll, err)
		}
		if cp != nil {
			p.Copies = append(p.Copies, *cp)
		}
		ws := curWorks[before:]
		if len(ws) == 0 {
			continue
		}
		p.Decisions = append(p.Decisions, dec)
		id, kern, err := lookup(fn)
		if err != nil {
			return Plan{}, fmt.Errorf("enqueue: task %d: %w", ti, err)
		}
		for i := range ws {
			ws[i].w.FuncId = uint16(id)
			ws[i].key = [3]int{0, ti, 0}
		}
		if open && len(curWorks)-start > MaxWorksPerLaunch {
			flush(before)
		}
		if !open {
			cur, open = Launch{Func: fn, Kernel: kern}, true
		}
	}
	if len(p2p) > 0 {
		ws, cps, decs, err := planP2P(c, p2p, choose, lookup)
		if err != nil {
			return Plan{}, err
		}
		p.Copies = append(p.Copies, cps...)
		p.Decisions = append(p.Decisions, decs...)
		if len(ws) > 0 {
			// Point-to-point works join the collectives' launch (their
			// keys (d, i, j), d >= 1, sort after the collectives' (0, ti,
			// 0) on every channel) unless that would overflow it.
			if open && len(curWorks)-start+len(ws) > MaxWorksPerLaunch {
				flush(len(curWorks))
			}
			if !open {
				_, kern, err := lookup(kspace.SendRecvFunc)
				if err != nil {
					return Plan{}, err
				}
				cur, open = Launch{Func: kspace.SendRecvFunc, Kernel: kern}, true
			}
			curWorks = append(curWorks, ws...)
		}
	}
	flush(len(curWorks))
	return p, nil
}

// finishLaunch sorts the works by channel (stably, so each channel keeps
// the key order) and fills the channel index.
func finishLaunch(l *Launch, ws []chanWork) {
	slices.SortStableFunc(ws, func(a, b chanWork) int {
		if a.ch != b.ch {
			return a.ch - b.ch
		}
		return slices.Compare(a.key[:], b.key[:])
	})
	l.Works = make([]generated.DevWork, len(ws))
	l.NThreads = MinBlockThreads
	for _, w := range ws {
		l.NThreads = max(l.NThreads, w.nt)
	}
	var counts [generated.MaxChannels]int
	for i, w := range ws {
		l.Works[i] = w.w
		if w.nt < l.NThreads {
			l.Works[i].NWarps = uint8(w.nt / 32)
		}
		counts[w.ch]++
		l.ChannelMask |= 1 << uint(w.ch)
	}
	n := 0
	for ch := range generated.MaxChannels {
		l.ChanWorkStart[ch] = uint16(n)
		n += counts[ch]
	}
	l.ChanWorkStart[generated.MaxChannels] = uint16(n)
}

// funcOf is the device function of a collective choice.
func funcOf(t Task, ch tune.Choice) kspace.Func {
	f := kspace.Func{Coll: t.Coll, RedOp: kspace.Unset, Type: kspace.Unset, Algo: ch.Algo, Proto: ch.Proto}
	if t.Coll.HasRedOp() {
		f.RedOp, f.Type = t.Op, t.Type
	}
	return f
}

// OneRankCopy is what collective t plans on a communicator of one rank
// when it needs no kernel: a copy of its bytes from its send buffer to its
// receive buffer, or nothing (a zero Copy) when it is in place or empty.
// ok is false when t needs a kernel (a PreMulSum scales its input, Avg of
// a floating-point type included) or is not a collective (SendRecv: its
// sends and receives to itself pair up in planP2P). Every other collective
// of one rank is its input: Sum, Prod, Min and Max of one value, and an
// integer Avg divided by 1.
func OneRankCopy(t Task) (cp Copy, ok bool) {
	if t.Coll == kspace.SendRecv || t.Coll.HasRedOp() && t.Op == kspace.PreMulSum {
		return Copy{}, false
	}
	if t.Bytes == 0 || t.Send == t.Recv {
		return Copy{}, true
	}
	return Copy{Dst: t.Recv, Src: t.Send, Bytes: t.Bytes}, true
}

// planColl splits one collective over its channels. A collective over one
// rank becomes a copy (unless it has to scale, PreMulSum).
func planColl(c Comm, t Task, choose Chooser, ws []chanWork) ([]chanWork, Decision, *Copy, kspace.Func, error) {
	units, unit := deviceUnits(t)
	total := bufferBytes(c, t)
	dec := Decision{Coll: t.Coll, Bytes: int64(total)}
	if t.Bytes == 0 {
		return ws, dec, nil, kspace.Func{}, nil
	}
	if c.NRanks == 1 {
		if cp, ok := OneRankCopy(t); ok {
			if cp.Bytes == 0 {
				return ws, dec, nil, kspace.Func{}, nil
			}
			return ws, dec, &cp, kspace.Func{}, nil
		}
	}
	if t.Choose != nil {
		choose = t.Choose
	}
	ch, err := choose.Choose(t.Coll, t.Op, t.Type, int64(total))
	if err != nil {
		return ws, dec, nil, kspace.Func{}, err
	}
	dec.Choice = ch
	win := ch.Algo == kspace.Direct && t.SendWin > 0 && t.RecvWin > 0
	fn := ch.Func
	if fn == (kspace.Func{}) {
		fn = funcOf(t, ch)
	}
	nc := min(max(ch.NChannels, 1), c.NChannels)
	if ch.Algo == kspace.PAT {
		nc = min(nc, PATChannels(c)) // the channels with PAT connections
	}
	granule := max(Granule/unit, 1)
	per, parts := split(units, nc, granule)
	dec.NChannels = parts
	ws = slices.Grow(ws, parts)
	for i := range parts {
		off, count := part(units, per, i)
		w := generated.DevWork{
			Sendbuff:   t.Send,
			Recvbuff:   t.Recv,
			Count:      units,
			ChanOffset: off,
			ChanCount:  count,
			RedOpArg:   t.OpArg,
			Root:       int32(t.Root),
			SendPeer:   -1,
			RecvPeer:   -1,
		}
		if t.OpArgPtr {
			w.Flags |= generated.WorkRedopArgPtr
		}
		if ch.OneHop {
			w.Flags |= generated.WorkOnehop
		}
		if win {
			w.Flags |= generated.WorkDirectWin
			w.SendPeer, w.RecvPeer = t.SendWin-1, t.RecvWin-1
		}
		ws = append(ws, chanWork{ch: i, w: w, nt: ch.NThreads})
	}
	return ws, dec, nil, fn, nil
}

// p2pPart is one part of a send or receive.
type p2pPart struct {
	buf   uint64
	bytes uint64
	msg   uint64 // the whole message's bytes (every part carries it)
	win   int32  // a send's window index + 1, 0 for none (Task.SendWin)
}

// planP2P pairs and splits the point-to-point tasks (see the package doc).
func planP2P(c Comm, tasks []Task, choose Chooser, lookup FuncLookup) ([]chanWork, []Copy, []Decision, error) {
	n := c.NRanks
	sends := make([][]Task, n) // by peer, in call order, empty ones dropped
	recvs := make([][]Task, n)
	for i, t := range tasks {
		if t.Peer < 0 || t.Peer >= n {
			return nil, nil, nil, fmt.Errorf("enqueue: %w: point-to-point task %d: peer %d outside 0..%d", ErrInvalidPlan, i, t.Peer, n-1)
		}
		if t.Bytes == 0 {
			continue
		}
		if t.IsSend {
			sends[t.Peer] = append(sends[t.Peer], t)
		} else {
			recvs[t.Peer] = append(recvs[t.Peer], t)
		}
	}
	var copies []Copy
	me := c.Rank
	if len(sends[me]) != len(recvs[me]) {
		return nil, nil, nil, fmt.Errorf("enqueue: %w: rank %d sends %d non-empty messages to itself but receives %d",
			ErrInvalidPlan, me, len(sends[me]), len(recvs[me]))
	}
	for i := range sends[me] {
		s, r := sends[me][i], recvs[me][i]
		if s.Bytes != r.Bytes {
			return nil, nil, nil, fmt.Errorf("enqueue: %w: rank %d's message %d to itself is %d bytes but the matching receive is %d bytes",
				ErrInvalidPlan, me, i, s.Bytes, r.Bytes)
		}
		if s.Send != r.Recv {
			copies = append(copies, Copy{Dst: r.Recv, Src: s.Send, Bytes: s.Bytes})
		}
	}
	var decs []Decision
	parts := func(t Task) ([]p2pPart, tune.Choice, error) {
		ch, err := choose.Choose(kspace.SendRecv, kspace.Unset, kspace.Unset, int64(t.Bytes))
		if err != nil {
			return nil, ch, err
		}
		k := min(max(ch.NChannels, 1), max(1, min(c.P2PChannelsPerPeer, c.NChannels)))
		n, _ := deviceUnits(t) // bytes
		per, nParts := split(n, k, P2PGranule)
		buf := t.Recv
		if t.IsSend {
			buf = t.Send
		}
		var win int32
		if t.IsSend && t.SendWin > 0 && int(t.SendWin) <= generated.DirectMaxWindows {
			win = t.SendWin
		}
		out := make([]p2pPart, nParts)
		for i := range out {
			off, count := part(n, per, i)
			out[i] = p2pPart{buf: buf + off, bytes: count, msg: t.Bytes, win: win}
		}
		decs = append(decs, Decision{Coll: kspace.SendRecv, Bytes: int64(t.Bytes), Choice: ch, NChannels: nParts})
		return out, ch, nil
	}
	var ws []chanWork
	for d := 1; d < n; d++ {
		to, from := (me+d)%n, (me-d+n)%n
		ss, rs := sends[to], recvs[from]
		for i := 0; i < max(len(ss), len(rs)); i++ {
			var sp, rp []p2pPart
			nt := 0
			if i < len(ss) {
				var ch tune.Choice
				var err error
				if sp, ch, err = parts(ss[i]); err != nil {
					return nil, nil, nil, fmt.Errorf("enqueue: send to %d: %w", to, err)
				}
				nt = max(nt, ch.NThreads)
			}
			if i < len(rs) {
				var ch tune.Choice
				var err error
				if rp, ch, err = parts(rs[i]); err != nil {
					return nil, nil, nil, fmt.Errorf("enqueue: receive from %d: %w", from, err)
				}
				nt = max(nt, ch.NThreads)
			}
			for j := 0; j < max(len(sp), len(rp)); j++ {
				w := generated.DevWork{SendPeer: -1, RecvPeer: -1, Root: -1}
				// ChanOffset and RedOpArg carry the whole messages' sizes:
				// the device compares them with the peer's (sendrecv.h), so
				// that a Send and a Recv of different sizes, which may split
				// into different numbers of parts, end in an error on both
				// ranks instead of parts that wait for a peer that never comes.
				if j < len(sp) {
					w.Sendbuff, w.Count, w.SendPeer, w.ChanOffset = sp[j].buf, sp[j].bytes, int32(to), sp[j].msg
					if sp[j].win > 0 {
						w.Flags |= generated.WorkP2pSendWin
						w.Root = sp[j].win - 1
					}
				}
				if j < len(rp) {
					w.Recvbuff, w.ChanCount, w.RecvPeer, w.RedOpArg = rp[j].buf, rp[j].bytes, int32(from), rp[j].msg
				}
				ws = append(ws, chanWork{ch: P2PChannel(c, d, j), key: [3]int{d, i, j}, w: w, nt: nt})
			}
		}
	}
	if len(ws) == 0 {
		return nil, copies, decs, nil
	}
	if len(ws) > MaxWorksPerLaunch {
		return nil, nil, nil, fmt.Errorf("enqueue: %w: %d point-to-point works in one group, at most %d", ErrInvalidPlan, len(ws), MaxWorksPerLaunch)
	}
	id, _, err := lookup(kspace.SendRecvFunc)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range ws {
		ws[i].w.FuncId = uint16(id)
		if ws[i].nt == 0 {
			ws[i].nt = 512
		}
	}
	return ws, copies, decs, nil
}
