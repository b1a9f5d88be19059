// Package tune chooses, for each collective call, the algorithm, protocol,
// number of channels and block size, with a cost model after NCCL's
// (see model.go) restricted to what the build provides and what NCCL_ALGO,
// NCCL_PROTO and the channel variables allow.
//
// # Channels and ranks that share a GPU
//
// NCCL runs one thread block per channel, and a block spins until its peers
// (the same channel of the neighbouring ranks) make progress. When several
// ranks of a communicator run on one GPU, their kernels share its SMs: if
// the blocks of all those ranks cannot be resident at once, a resident block
// waits forever for a peer block that is queued behind it. That is how NCCL
// 2.30 deadlocks with 4 or more ranks on one GPU from 1 MiB up. The tuner
// therefore never returns more channels than
//
//	NChannels × RanksPerGPU ≤ SMCount × BlocksPerSM   (and ≤ 64)
//
// whatever NCCL_NCHANNELS, NCCL_MIN_NCHANNELS or the topology ask for: it
// clamps them and logs a warning.
package tune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// Link is the kind of link between GPUs of one node.
type Link int

// The intra-node links, as NCCL's latency table tells them apart.
const (
	LinkNVLink Link = iota // NVLink, or ranks sharing one GPU
	LinkPCI
)

// Topology is what the tuner needs to know about a communicator.
type Topology struct {
	NRanks int // ranks in the communicator
	NNodes int // nodes (hosts, or fake hosts with NCCL_HOSTID); 0 counts as 1
	NGPUs  int // distinct GPUs; informational
	// RanksPerGPU is the most ranks of the communicator co-located on one
	// GPU (0 counts as 1).
	RanksPerGPU int
	// SMCount is the GPU's number of SMs, and BlocksPerSM how many blocks
	// of our kernels one SM holds at once (from the occupancy calculator).
	// Both are required: they bound the channels (see the package doc).
	SMCount     int
	BlocksPerSM int
	// IntraBW is the bandwidth of one channel within a node, InterBW
	// between nodes (needed when NNodes > 1), both in GB/s.
	IntraBW float64
	InterBW float64
	// NetBW is the network's bandwidth between nodes in GB/s, all
	// channels together (one host's NIC; SocketNetBW for a socket device
	// of unknown speed). When set (NNodes > 1) it caps the bus bandwidth
	// of calls that cross nodes and turns on NCCL's network latency rules
	// (net.go); zero leaves InterBW per channel, uncapped.
	NetBW float64
	// NetLLBW caps LL's bus bandwidth (GB/s) on calls that cross nodes,
	// where the network carries LL worse than NCCL's model says (ncclgo's
	// socket net: SocketNetLLBW); zero leaves the model's.
	NetLLBW float64
	// NetChannelBytes is the fewest bytes a channel of a call that
	// crosses nodes should carry, and NetMaxChannels the most channels
	// such a call uses (ncclgo's socket net: SocketNetChannelBytes and
	// SocketNetMaxChannels): every channel is a network connection with
	// costs of its own. Zero leaves the channels to the thread thresholds
	// and the channel bounds alone.
	NetChannelBytes int64
	NetMaxChannels  int
	// SimpleOneHop lets a RING/SIMPLE AllReduce on exactly 2 ranks run in
	// one hop where a channel's share fits one SIMPLE slot (Choice.OneHop,
	// NG_WORK_ONEHOP): half the ring's latency, the same bytes.
	SimpleOneHop bool
	// IntraLink is the link within a node (NVLink by default).
	IntraLink Link
	// NChannels is how many channels the communicator has set up; 0 means
	// as many as the limits allow (see Tuner.MaxChannels).
	NChannels int
	// Direct is true when every rank can load and store every other
	// rank's user buffers (one process, and every pair of ranks on the
	// same GPU or on GPUs with peer access) and the device set up the
	// DIRECT mailboxes: only then may DIRECT run (see direct.go).
	Direct bool
	// DirectLLAcross is true when the ranks are in several processes of
	// one host that can load each other's memory and that share their
	// DIRECT mailboxes (runtime/comm's setupDirect mapped every peer's,
	// and every rank agreed), but not their user buffers: DIRECT may then
	// run AllReduce in its LL one-shot only, which touches the mailboxes
	// alone (direct.go). Every rank has the same value, so every rank
	// makes the same choice. Direct, where set, allows more.
	DirectLLAcross bool
}

// Choice is the tuner's answer for one call.
type Choice struct {
	// Func is the device function to run.
	Func kspace.Func
	// Algo is the algorithm; kspace.Unset for SendRecv, which has none.
	Algo  kspace.Algo
	Proto kspace.Proto
	// NChannels is the number of channels (thread blocks) and NThreads the
	// threads per block.
	NChannels int
	NThreads  int
	// OneHop asks a RING/SIMPLE AllReduce on 2 ranks to run in one hop
	// (Topology.SimpleOneHop; the device does it where a channel's share
	// fits one slot).
	OneHop bool
	// PredictedTime is the model's estimate of the call's duration.
	PredictedTime time.Duration
}

func (c Choice) String() string {
	a := "-"
	if c.Algo != kspace.Unset {
		a = c.Algo.String()
	}
	return fmt.Sprintf("%s/%s channels=%d threads=%d predicted=%v", a, c.Proto, c.NChannels, c.NThreads, c.PredictedTime)
}

// ErrNoChoice is wrapped by Choose's errors when the settings and the build
// leave nothing to run a call with.
var ErrNoChoice = errors.New("no algorithm and protocol to run")

// ErrDirectLLOnly is wrapped, with ErrNoChoice, by Choose's errors for an
// AllReduce above DirectLLLimit that only DIRECT may run (NCCL_ALGO) where
// the ranks share their mailboxes alone (Topology.DirectLLAcross).
var ErrDirectLLOnly = errors.New("DIRECT across processes runs without registered windows only as the LL one-shot")

// ErrTopology is wrapped by New's errors about an unusable Topology.
var ErrTopology = errors.New("invalid topology")

// Tuner chooses how to run each call. It is immutable after New and safe for
// concurrent use.
type Tuner struct {
	topo      Topology
	cfg       config.Config
	available func(kspace.Func) bool
	why       func(kspace.Func) error // why a function is unavailable; may be nil
	log       *slog.Logger

	residentCap int // channels that keep every co-located rank resident
	minCh       int
	maxCh       int
	nThreads    [kspace.NumProtos]int

	// cands caches, per (collective, op, type), the (algorithm, protocol)
	// pairs that the build and the settings allow, or why there are none:
	// neither changes after New, and working them out costs more than
	// the cost model itself.
	cands [kspace.NumColls][kspace.NumRedOps][kspace.NumTypes]atomic.Pointer[candidates]
	// last holds, per (collective, op, type), the latest choice and the
	// size it was made for: a program calls one shape again and again
	// (a training step, a benchmark loop), and the cost model takes most
	// of a small call's planning time (BenchmarkChoose8B).
	last [kspace.NumColls][kspace.NumRedOps][kspace.NumTypes]atomic.Pointer[lastChoice]
}

// lastChoice is a choice and the size it was made for.
type lastChoice struct {
	nBytes int64
	ch     Choice
}

// candidates are the pairs a call may choose from, or the error that says
// why it has none.
type candidates struct {
	pairs []algoProto
	err   error
}

type algoProto struct {
	a kspace.Algo
	p kspace.Proto
}

// Option configures a Tuner.
type Option func(*Tuner)

// WithLogger makes the tuner log through l (config.NewLogger's, typically):
// its channel decisions at Info (Warn when it clamps a setting) and every
// choice at Debug (NCCL's TRACE), all under subsystem TUNING.
func WithLogger(l *slog.Logger) Option {
	return func(t *Tuner) {
		if l != nil {
			t.log = l
		}
	}
}

// WithUnavailable makes the errors for a call that the build cannot run at
// all wrap why(f) for one of its functions: the kernel set's own error,
// which names the missing function and the set's filter.
func WithUnavailable(why func(kspace.Func) error) Option {
	return func(t *Tuner) { t.why = why }
}

// missing is why the build lacks every function of coll with op and ty:
// why() of the first one the model would otherwise allow.
func (t *Tuner) missing(coll kspace.Coll, op kspace.RedOp, ty kspace.Type) error {
	if t.why == nil {
		return nil
	}
	if coll == kspace.SendRecv {
		return t.why(kspace.SendRecvFunc)
	}
	for _, a := range kspace.AlgosOf[coll] {
		for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
			f := funcOf(coll, op, ty, a, p)
			if _, _, ok := kspace.Requirements(f); ok && modeled(coll, a) && kspace.Implemented(coll, a) {
				if err := t.why(f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// New returns a tuner for topo under cfg. available reports whether a
// device function is in the build (the generated table's answer); nil means
// every function is. Functions of algorithms that kspace.Implemented
// rejects, or that the model does not cover, are never chosen, nor are NVLS
// algorithms unless cfg.NVLSEnable.
func New(topo Topology, cfg config.Config, available func(kspace.Func) bool, opts ...Option) (*Tuner, error) {
	t := &Tuner{topo: topo, cfg: cfg, available: available, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(t)
	}
	t.log = t.log.With(config.SubsysTuning.Attr())
	if t.available == nil {
		t.available = func(kspace.Func) bool { return true }
	}
	tp := &t.topo
	if tp.NNodes <= 0 {
		tp.NNodes = 1
	}
	if tp.RanksPerGPU <= 0 {
		tp.RanksPerGPU = 1
	}
	switch {
	case tp.NRanks < 1:
		return nil, fmt.Errorf("tune: %w: NRanks=%d, want at least 1", ErrTopology, tp.NRanks)
	case tp.NNodes > tp.NRanks:
		return nil, fmt.Errorf("tune: %w: NNodes=%d exceeds NRanks=%d", ErrTopology, tp.NNodes, tp.NRanks)
	case tp.RanksPerGPU > tp.NRanks:
		return nil, fmt.Errorf("tune: %w: RanksPerGPU=%d exceeds NRanks=%d", ErrTopology, tp.RanksPerGPU, tp.NRanks)
	case tp.SMCount < 1 || tp.BlocksPerSM < 1:
		return nil, fmt.Errorf("tune: %w: SMCount=%d and BlocksPerSM=%d must both be at least 1 (they bound the channels of co-located ranks)",
			ErrTopology, tp.SMCount, tp.BlocksPerSM)
	case !(tp.IntraBW > 0) || math.IsInf(tp.IntraBW, 0):
		return nil, fmt.Errorf("tune: %w: IntraBW=%v, want a positive bandwidth in GB/s", ErrTopology, tp.IntraBW)
	case tp.NetBW < 0 || math.IsNaN(tp.NetBW) || math.IsInf(tp.NetBW, 0):
		return nil, fmt.Errorf("tune: %w: NetBW=%v, want 0 (no network model) or a bandwidth in GB/s", ErrTopology, tp.NetBW)
	case tp.NetLLBW < 0 || math.IsNaN(tp.NetLLBW) || math.IsInf(tp.NetLLBW, 0):
		return nil, fmt.Errorf("tune: %w: NetLLBW=%v, want 0 (the model's LL bandwidth) or a bandwidth in GB/s", ErrTopology, tp.NetLLBW)
	case tp.NetChannelBytes < 0 || tp.NetMaxChannels < 0:
		return nil, fmt.Errorf("tune: %w: NetChannelBytes=%d and NetMaxChannels=%d, want 0 (no bound) or positive values",
			ErrTopology, tp.NetChannelBytes, tp.NetMaxChannels)
	case tp.NNodes > 1 && (!(tp.InterBW > 0) || math.IsInf(tp.InterBW, 0)):
		return nil, fmt.Errorf("tune: %w: InterBW=%v with %d nodes, want a positive bandwidth in GB/s", ErrTopology, tp.InterBW, tp.NNodes)
	}
	resident := tp.SMCount * tp.BlocksPerSM
	t.residentCap = min(config.MaxChannels, resident/tp.RanksPerGPU)
	if t.residentCap < 1 {
		return nil, fmt.Errorf("tune: %w: %d ranks share one GPU but only %d blocks (%d SMs × %d) can be resident at once; they would deadlock",
			ErrTopology, tp.RanksPerGPU, resident, tp.SMCount, tp.BlocksPerSM)
	}
	t.chooseChannelBounds()

	t.nThreads = [kspace.NumProtos]int{config.MaxNThreads, config.MaxLL128NThreads, config.MaxNThreads}
	if cfg.NThreads > 0 {
		t.nThreads[kspace.LL], t.nThreads[kspace.Simple] = cfg.NThreads, cfg.NThreads
	}
	if cfg.LL128NThreads > 0 {
		t.nThreads[kspace.LL128] = cfg.LL128NThreads
	}
	t.log.Info("tuner ready", "nranks", tp.NRanks, "nnodes", tp.NNodes, "ranksPerGPU", tp.RanksPerGPU,
		"minChannels", t.minCh, "maxChannels", t.maxCh, "residentCap", t.residentCap,
		"algo", cfg.Algo.String(), "proto", cfg.Proto.String())
	return t, nil
}

// chooseChannelBounds derives [minCh, maxCh] from the settings, the
// topology and the residency cap, clamping (and logging) what exceeds it.
func (t *Tuner) chooseChannelBounds() {
	capWhy := fmt.Sprintf("%d ranks share one GPU and %d SMs × %d blocks/SM hold %d channels each; more would deadlock",
		t.topo.RanksPerGPU, t.topo.SMCount, t.topo.BlocksPerSM, t.residentCap)
	clamp := func(name string, v int) int {
		if v > t.residentCap {
			t.log.Warn(fmt.Sprintf("%s=%d clamped to %d: %s", name, v, t.residentCap, capWhy),
				config.SubsysEnv.Attr(), "requested", v, "clamped", t.residentCap)
			return t.residentCap
		}
		return v
	}
	if n := t.cfg.NChannels; n > 0 {
		n = clamp("NCCL_NCHANNELS", n)
		t.minCh, t.maxCh = n, n
		return
	}
	t.maxCh = t.residentCap
	if n := t.cfg.MaxNChannels; n > 0 {
		t.maxCh = min(t.maxCh, n)
	}
	if n := t.topo.NChannels; n > 0 {
		t.maxCh = min(t.maxCh, n)
	}
	if t.netModel() && t.topo.NetMaxChannels > 0 {
		// Every collective crosses nodes and uses at most
		// NetMaxChannels (netChannels): set up no more, each a network
		// connection with buffers on both sides. Send/Recv inside a node
		// gets as many.
		t.maxCh = min(t.maxCh, t.topo.NetMaxChannels)
	}
	t.minCh = 1
	if n := t.cfg.MinNChannels; n > 0 {
		t.minCh = clamp("NCCL_MIN_NCHANNELS", n)
		// An explicit minimum wins over the topology's channel count.
		t.maxCh = max(t.maxCh, t.minCh)
	}
}

// MaxChannels is the most channels any call will use: the number of
// channels the communicator should set up.
func (t *Tuner) MaxChannels() int { return t.maxCh }

// MinChannels is the fewest channels any call will use.
func (t *Tuner) MinChannels() int { return t.minCh }

// ResidentCap is the channel limit that keeps all co-located ranks
// resident: min(64, SMCount × BlocksPerSM / RanksPerGPU).
func (t *Tuner) ResidentCap() int { return t.residentCap }

// funcOf builds the device function of a call.
func funcOf(c kspace.Coll, op kspace.RedOp, ty kspace.Type, a kspace.Algo, p kspace.Proto) kspace.Func {
	if c == kspace.SendRecv {
		return kspace.SendRecvFunc
	}
	f := kspace.Func{Coll: c, RedOp: kspace.Unset, Type: kspace.Unset, Algo: a, Proto: p}
	if c.HasRedOp() {
		f.RedOp, f.Type = op, ty
	}
	return f
}

// usable reports whether (a, p) can run c with op and ty, leaving the
// user's selections aside.
func (t *Tuner) usable(c kspace.Coll, op kspace.RedOp, ty kspace.Type, a kspace.Algo, p kspace.Proto) bool {
	if !modeled(c, a) || !kspace.Implemented(c, a) || a.IsNVLS() && !t.cfg.NVLSEnable {
		return false
	}
	if a == kspace.PAT {
		if ok, _ := t.patApplies(c); !ok {
			return false
		}
	}
	if a == kspace.Direct && !t.topo.Direct && !(t.topo.DirectLLAcross && c == kspace.AllReduce) {
		return false
	}
	f := funcOf(c, op, ty, a, p)
	if _, _, ok := kspace.Requirements(f); !ok {
		return false
	}
	return t.available(f)
}

// channels returns the channels and threads of a call: all of maxCh, fewer
// (down to minCh) while each thread would get less than its threshold of
// bytes, then fewer threads (as NCCL does).
func (t *Tuner) channels(a kspace.Algo, p kspace.Proto, nBytes int64) (nc, nt int) {
	nc, nt = t.maxCh, t.nThreads[p]
	thr := threadThreshold[p]
	if a == kspace.Ring && p == kspace.LL {
		thr *= int64(t.topo.NRanks)
	}
	// The largest channel count in [minCh, maxCh] that gives each thread
	// its threshold, or minCh; then fewer threads.
	if per := int64(nt) * thr; nBytes < int64(nc)*per {
		nc = max(t.minCh, int(nBytes/per))
	}
	for nBytes < int64(nc)*int64(nt)*thr {
		switch {
		case nt%128 == 0 && nt > 2*config.WarpSize:
			nt /= 2
		default:
			return t.netChannels(nc, nBytes), nt
		}
	}
	return t.netChannels(nc, nBytes), nt
}

// Choose picks how to run coll on nBytes: for AllReduce, Broadcast and
// Reduce the buffer's size; for AllGather the output's, for ReduceScatter
// the input's (the count times the rank count); for SendRecv the message's.
// op and t matter for the reducing collectives only.
func (t *Tuner) Choose(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, nBytes int64) (Choice, error) {
	if coll < 0 || coll >= kspace.NumColls {
		return Choice{}, fmt.Errorf("tune: unknown collective %d", int(coll))
	}
	if coll.HasRedOp() && (op < 0 || op >= kspace.NumRedOps || ty < 0 || ty >= kspace.NumTypes) {
		return Choice{}, fmt.Errorf("tune: %s with reduction op %d and type %d: out of range", coll, int(op), int(ty))
	}
	if nBytes < 0 {
		return Choice{}, fmt.Errorf("tune: %s of %d bytes: negative size", coll, nBytes)
	}
	var ch Choice
	var err error
	if coll == kspace.SendRecv {
		ch, err = t.chooseP2P(nBytes)
	} else {
		ch, err = t.chooseColl(coll, op, ty, nBytes)
	}
	if err != nil {
		return Choice{}, err
	}
	if t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("choice", "coll", coll.String(), "bytes", nBytes, "algo", algoName(ch.Algo), "proto", ch.Proto.String(),
			"nchannels", ch.NChannels, "nthreads", ch.NThreads, "predicted", ch.PredictedTime)
	}
	return ch, nil
}

func algoName(a kspace.Algo) string {
	if a == kspace.Unset {
		return "-"
	}
	return a.String()
}

func (t *Tuner) chooseColl(coll kspace.Coll, op kspace.RedOp, ty kspace.Type, nBytes int64) (Choice, error) {
	o, y := op, ty
	if !coll.HasRedOp() {
		o, y = 0, 0 // byte-moving collectives do not depend on them
	}
	memo := &t.last[coll][o][y]
	if m := memo.Load(); m != nil && m.nBytes == nBytes {
		return m.ch, nil
	}
	slot := &t.cands[coll][o][y]
	cs := slot.Load()
	if cs == nil {
		cs = t.candidatesFor(coll, op, ty)
		slot.Store(cs)
	}
	if cs.err != nil {
		return Choice{}, cs.err
	}
	best := Choice{PredictedTime: -1}
	bestUs := math.Inf(1)
	found, llOnly := false, false
	for _, ap := range cs.pairs {
		a, p := ap.a, ap.p
		nc, nt := t.channels(a, p, nBytes)
		if a == kspace.PAT {
			nc = min(nc, PATMaxChannels) // the channels with PAT connections
		}
		us := 0.0
		if a == kspace.Direct {
			var mode directMode
			nc, nt, mode = t.directChannels(coll, nBytes)
			if !t.topo.Direct && mode != directLL {
				llOnly = true // the mailboxes alone: not at this size
				continue
			}
			us = t.directTime(coll, nBytes, nc, mode)
		} else if t.topo.NRanks > 1 {
			us = t.latencyOn(coll, a, p, nBytes, nc) + float64(nBytes)/(1000*t.bandwidth(coll, a, p, nc, nBytes))
		} else if !(a == kspace.Ring && p == kspace.Simple) {
			us = 1e-3 // one rank: prefer RING/SIMPLE, as NCCL does
		}
		if us < bestUs {
			bestUs, found = us, true
			best = Choice{Func: funcOf(coll, op, ty, a, p), Algo: a, Proto: p, NChannels: nc, NThreads: nt,
				OneHop: p == kspace.Simple && a == kspace.Ring && t.ringOneHop(coll, p, nBytes, nc)}
		}
	}
	if !found && llOnly {
		// NCCL_ALGO left DIRECT alone, and it cannot run this size.
		return Choice{}, fmt.Errorf("tune: %w: %s of %d bytes: %w, up to %d bytes (%d channels of %d bytes); "+
			"%s leaves no other algorithm (register the buffers as windows, or allow another)",
			ErrNoChoice, coll, nBytes, ErrDirectLLOnly, t.DirectLLLimit(), t.DirectLLLimit()/directLLBytes, directLLBytes, t.cfg.Algo.Describe())
	}
	best.PredictedTime = micros(bestUs)
	memo.Store(&lastChoice{nBytes: nBytes, ch: best})
	return best, nil
}

// candidatesFor works out the (algorithm, protocol) pairs that the build
// and NCCL_ALGO / NCCL_PROTO leave for coll with op and ty, in the order
// the cost model visits them, or the error that names what is available.
func (t *Tuner) candidatesFor(coll kspace.Coll, op kspace.RedOp, ty kspace.Type) *candidates {
	what := coll.String()
	if coll.HasRedOp() {
		what = fmt.Sprintf("%s %s %s", coll, op, ty)
	}
	// What the build offers, regardless of NCCL_ALGO and NCCL_PROTO.
	var availAlgos []kspace.Algo
	for _, a := range kspace.AlgosOf[coll] {
		usable := false
		for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
			if t.usable(coll, op, ty, a, p) {
				usable = true
			}
		}
		if usable {
			availAlgos = append(availAlgos, a)
		}
	}
	if len(availAlgos) == 0 {
		if err := t.missing(coll, op, ty); err != nil {
			return &candidates{err: fmt.Errorf("tune: %w: %s has no function in this kernel set: %w", ErrNoChoice, what, err)}
		}
		return &candidates{err: fmt.Errorf("tune: %w: %s has no implemented function in this build", ErrNoChoice, what)}
	}
	var algos []kspace.Algo
	for _, a := range availAlgos {
		if t.cfg.Algo.Allows(coll, a) {
			algos = append(algos, a)
		}
	}
	if len(algos) == 0 {
		why := ""
		if t.cfg.Algo.Allows(coll, kspace.PAT) && modeled(coll, kspace.PAT) {
			if ok, w := t.patApplies(coll); !ok {
				why = " (" + w + ")"
			}
		}
		return &candidates{err: fmt.Errorf("tune: %w: %s leaves no algorithm for %s; available: %s%s",
			ErrNoChoice, t.cfg.Algo.Describe(), coll, joinNames(availAlgos), why)}
	}
	cs := &candidates{}
	for _, a := range algos {
		for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
			if t.cfg.Proto.Allows(coll, p) && t.usable(coll, op, ty, a, p) {
				cs.pairs = append(cs.pairs, algoProto{a, p})
			}
		}
	}
	if len(cs.pairs) == 0 {
		// Every allowed algorithm has a usable protocol, so NCCL_PROTO
		// excluded them all.
		var pairs []string
		for _, a := range algos {
			for p := kspace.Proto(0); p < kspace.NumProtos; p++ {
				if t.usable(coll, op, ty, a, p) {
					pairs = append(pairs, a.String()+"/"+p.String())
				}
			}
		}
		cs.err = fmt.Errorf("tune: %w: %s leaves no protocol for %s (%s); available: %s",
			ErrNoChoice, t.cfg.Proto.Describe(), what, t.cfg.Algo.Describe(), strings.Join(pairs, ", "))
	}
	return cs
}

func (t *Tuner) chooseP2P(nBytes int64) (Choice, error) {
	if !t.available(kspace.SendRecvFunc) {
		if err := t.missing(kspace.SendRecv, 0, 0); err != nil {
			return Choice{}, fmt.Errorf("tune: %w: %w", ErrNoChoice, err)
		}
		return Choice{}, fmt.Errorf("tune: %w: SendRecv is not in this build", ErrNoChoice)
	}
	order := []kspace.Proto{kspace.Simple, kspace.LL}
	if nBytes <= p2pLLThreshold {
		order = []kspace.Proto{kspace.LL, kspace.Simple}
	}
	for _, p := range order {
		if !t.cfg.Proto.Allows(kspace.SendRecv, p) {
			continue
		}
		nc, nt := t.channels(kspace.Unset, p, nBytes)
		return Choice{Func: kspace.SendRecvFunc, Algo: kspace.Unset, Proto: p, NChannels: nc, NThreads: nt,
			PredictedTime: micros(t.p2pTime(p, nc, nBytes))}, nil
	}
	return Choice{}, fmt.Errorf("tune: %w: %s leaves no protocol for SendRecv; available: LL, SIMPLE",
		ErrNoChoice, t.cfg.Proto.Describe())
}

func micros(us float64) time.Duration { return time.Duration(math.Round(us * 1e3)) }

func joinNames[E fmt.Stringer](xs []E) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}
