package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
	"github.com/ncclgo/ncclgo/runtime/graph"
	"github.com/ncclgo/ncclgo/runtime/kernels"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
	"github.com/ncclgo/ncclgo/runtime/tune"
)

// DefaultNChannels is the number of channels a communicator sets up when
// NCCL_NCHANNELS / NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS do not say
// otherwise (fewer when ranks share a GPU and fewer keep them resident).
const DefaultNChannels = 32

// intraBW is the bandwidth of one channel within a node, GB/s, for the
// tuner's model (NCCL's figure for SM90 NVLink).
const intraBW = 20.0

// peerInfo is what ranks tell each other at init.
type peerInfo struct {
	PID    int
	Host   string
	Device int
	BusID  string
}

// Init sets rank net.Rank() of a communicator up on device; on error it
// frees what it acquired but leaves net to the caller. It retains no
// reference on s.LogFile: the caller retains one for the engine, which
// Destroy releases.
func Init(ctx context.Context, net bootstrap.Network, device int, s Settings) (_ *Engine, err error) {
	rank, n := net.Rank(), net.Size()
	c := &Engine{rank: rank, nRanks: n, device: device, s: s, net: net, events: map[uintptr]launchEvent{}}
	c.log = s.Log.With("rank", rank)
	if rank == 0 {
		for _, w := range ignoredSettings(s.Config) {
			c.log.Info(w, config.SubsysEnv.Attr(), config.SubsysInit.Attr())
		}
	}
	fail := func(err error) (*Engine, error) {
		c.net = nil // the caller closes it
		c.s.LogFile = nil
		_ = c.free()
		return nil, fmt.Errorf("ncclgo: init of rank %d on device %d: %w", rank, device, err)
	}
	dev, err := cuda.GetDevice(device)
	if err != nil {
		return fail(err)
	}
	if c.gpu, err = topo.Describe(dev); err != nil {
		return fail(err)
	}
	// Who runs where.
	me := peerInfo{PID: os.Getpid(), Host: hostID(s.Config), Device: device, BusID: c.gpu.BusID}
	b, _ := json.Marshal(me)
	all, err := net.AllGather(ctx, b)
	if err != nil {
		return fail(fmt.Errorf("exchanging rank descriptions: %w", err))
	}
	peers := make([]peerInfo, n)
	tpeers := make([]transport.Peer, n)
	devs := make([]int, n)
	for r, raw := range all {
		if err := json.Unmarshal(raw, &peers[r]); err != nil {
			return fail(fmt.Errorf("rank %d's description: %w", r, err))
		}
		tpeers[r] = transport.Peer{Rank: r, PID: peers[r].PID, Host: peers[r].Host, Device: peers[r].Device, BusID: peers[r].BusID}
		devs[r] = peers[r].Device
	}
	self := tpeers[rank]
	c.procs = tpeers
	local := func(r int) bool { return tpeers[r].SameProcess(self) }
	for r := range tpeers {
		c.lanes.shared = c.lanes.shared || (r != rank && local(r) && tpeers[r].SameGPU(self))
	}
	mps := topo.MPSActive(os.Getenv)
	if err := checkSharedGPUs(tpeers, mps); err != nil {
		return fail(err)
	}
	c.layout = topo.NewLayout(devs)
	if c.layout.NGPUs > 1 {
		// Only this host's ordinals can be asked about: another host's
		// may not exist here (ranks of several hosts share one ordinal
		// table), and no GPU here reaches it by peer access anyway.
		here := map[int]bool{}
		for _, p := range tpeers {
			if p.Host == self.Host {
				here[p.Device] = true
			}
		}
		probe := func(a, b int) (bool, error) {
			if !here[a] || !here[b] {
				return false, nil
			}
			return topo.CUDAPeers(a, b)
		}
		if err := c.layout.ProbePeers(probe); err != nil {
			return fail(err)
		}
		if err := c.layout.ProbeNVLinks(busIDsByGPU(c.layout, peers), topo.NVML); err != nil && rank == 0 {
			c.log.Info(fmt.Sprintf("NVLink counts unknown (the tuner assumes NVLink): %v", err), config.SubsysInit.Attr())
		}
	}
	if cx := s.Contexts[device]; cx != nil {
		// A wrapper of our own, so that Destroy's Release forgets only it.
		c.cctx, err = cuda.WrapContext(cx.Handle())
	} else {
		c.cctx, err = dev.PrimaryContext()
	}
	if err != nil {
		return fail(err)
	}
	c.peers = &cudaPeers{self: c.cctx}
	if err := enablePeers(c.layout, rank, local, c.peers); err != nil {
		return fail(err)
	}
	// Kernels.
	image, src, err := s.FindImage()
	if err != nil {
		return fail(err)
	}
	if c.kset, err = kernels.Load(c.cctx, image); err != nil {
		return fail(fmt.Errorf("loading kernels from %s: %w", src, err))
	}
	blocksPerSM, err := c.kset.MaxBlocksPerSM(generated.MaxNthreads)
	if err != nil {
		return fail(err)
	}
	// Tuning and channels, from numbers every rank agrees on: the SMs this
	// process may use (its MPS share), and the ranks that compete for them
	// (smshare.go).
	share, err := topo.SMShareOf(ctxSMs{dev: dev, ctx: c.cctx}, mps, os.Getenv)
	if err != nil {
		return fail(err)
	}
	c.gpu.SMCount = share.SMs
	agreed, err := agreeResidency(ctx, net, shareView{PID: me.PID, Host: me.Host, Machine: topo.ThisMachine(), GPU: gpuName(residencyInfo{Device: device, BusID: c.gpu.BusID}),
		SMs: share.SMs, BlocksPerSM: blocksPerSM, Percent: share.Percent})
	if err != nil {
		return fail(err)
	}
	gpu := c.gpu
	gpu.SMCount, blocksPerSM = agreed.SMs, agreed.BlocksPerSM
	c.log.Info(fmt.Sprintf("SMs: this process may use %s; channels sized for %d SMs × %d blocks/SM shared by %d ranks (%s)",
		share, agreed.SMs, agreed.BlocksPerSM, agreed.RanksPerGPU, agreed.Why), config.SubsysInit.Attr(), config.SubsysTuning.Attr())
	top := withNodes(tuneTopology(c.layout, gpu, blocksPerSM, s.Config), tpeers)
	top.RanksPerGPU = agreed.RanksPerGPU
	top.Direct = directEligible(tpeers, c.layout, s.Config.P2PDisable)
	if top.SimpleOneHop, err = simpleOneHopFromEnv(os.LookupEnv, top.NNodes); err != nil {
		return fail(err)
	}
	p2pLim, err := p2pLimitsFrom(s.P2PPerPeer, s.Config.P2PDisable, os.Getenv)
	if err != nil {
		return fail(err)
	}
	// The channels per peer before the communicator's channel count bounds
	// them: every rank must find the same (p2pchan.go).
	p2pPaths, _ := p2pPerPeer(c.layout, tpeers, config.MaxChannels, p2pLim)
	tp, changed, err := agreeTuning(ctx, net, tuningInputs{
		Topology: top,
		Settings: settingsOf(s.Config, p2pPaths, c.kset.Filter()),
	})
	if err != nil {
		return fail(err)
	}
	if changed {
		c.log.Warn(fmt.Sprintf("this rank's view of the topology differs from rank 0's; tuning with rank 0's (%+v)", tp), config.SubsysInit.Attr())
	}
	tunerAvail := c.kset.Available
	newTuner := func(tp tune.Topology) (*tune.Tuner, error) {
		return tune.New(tp, s.Config, tunerAvail, tune.WithLogger(s.Log.With("rank", rank)),
			tune.WithUnavailable(func(f kspace.Func) error { _, err := c.kset.Lookup(f); return err }))
	}
	c.tuner, err = newTuner(tp)
	if err != nil {
		return fail(err)
	}
	c.nChannels = min(c.tuner.MaxChannels(), generated.MaxChannels)
	c.rings, c.trees = buildGraphs(c.layout, tpeers, c.nChannels)
	perPeer, perPeerWhy := p2pPerPeer(c.layout, tpeers, c.nChannels, p2pLim)
	c.plan = enqueue.Comm{Rank: rank, NRanks: n, NChannels: c.nChannels, P2PChannelsPerPeer: perPeer}
	if err := c.joinResidency(ctx, blocksPerSM); err != nil { // residency.go
		return fail(err)
	}
	c.log.Info(fmt.Sprintf("init: %d ranks, %s, %d channels, %d SMs × %d blocks/SM, kernels from %s",
		n, c.layout, c.nChannels, c.gpu.SMCount, blocksPerSM, src), config.SubsysInit.Attr())
	if rank == 0 {
		c.log.Info(fmt.Sprintf("%d p2p channels per peer: %s", perPeer, perPeerWhy), config.SubsysInit.Attr(), config.SubsysP2P.Attr())
		for ch, ring := range c.rings {
			c.log.Info(fmt.Sprintf("Channel %02d/%02d : %s", ch, c.nChannels, joinInts(ring)), config.SubsysInit.Attr())
		}
	}
	for ch, t := range c.trees {
		c.log.Info(fmt.Sprintf("Trees [%d] %s->%d->%d", ch, joinInts(t.Down[rank]), rank, t.Up[rank]), config.SubsysInit.Attr())
	}
	// Connections.
	pol, err := transport.PolicyFromEnv(s.Config.P2PDisable, s.Config.SHMDisable, os.Getenv)
	if err != nil {
		return fail(err)
	}
	sizes := transport.Sizes{uint32(s.Config.LLBuffSize), uint32(s.Config.LL128BuffSize), uint32(s.Config.SimpleBuffSize(tp.NNodes))}
	if tp.NNodes > 1 {
		// Across hosts some ring goes through NET, so LL128 stays off
		// (below): no connection gets LL128 FIFOs (4.7 MiB each by
		// default, page-locked host memory on a NET connection).
		sizes[1] = 0
	}
	edges := withPATEdges(edges(c.plan, c.rings, c.trees), c.plan, tp.NNodes == tp.NRanks) // pat.go
	topts := transport.Options{Policy: pol, Link: linkFunc(c.layout, rank, tpeers),
		Log:        func(line string) { c.log.Info(line, config.SubsysInit.Attr(), config.SubsysP2P.Attr()) },
		ProxyError: c.proxyFailed, Aborted: c.Aborted, AbortCause: c.abortCause, NetLog: c.log}
	if c.conns, err = transport.Connect(ctx, net, c.cctx, rank, tpeers, edges, sizes, topts); err != nil {
		return fail(err)
	}
	c.log.Info(fmt.Sprintf("connected %d edges, %d MiB of buffers", len(edges), c.conns.Bytes()>>20), config.SubsysInit.Attr(), config.SubsysP2P.Attr())
	logChannelZero(c.log, c.conns)
	if c.conns.Uses("NET") {
		if w := fewCPUsWarning(runtime.NumCPU()); w != "" {
			c.log.Warn(w, config.SubsysInit.Attr(), config.SubsysNet.Attr())
		}
	}
	if sizes.NoLL128() || c.conns.Uses("SHM") || c.conns.Uses("NET") {
		// LL128 relies on 128-byte stores landing whole, which holds in
		// device memory but not across PCIe into host memory (NCCL too
		// keeps LL128 off such paths), and the proxy moves whole SIMPLE
		// steps and LL lines only. Every rank sees the same answer.
		avail := kernels.Available
		tunerAvail = func(f kspace.Func) bool { return f.Proto != kspace.LL128 && avail(f) }
		c.tuner, err = newTuner(tp)
		if err != nil {
			return fail(err)
		}
		if rank == 0 {
			c.log.Info("LL128 off: some connections go through host memory (SHM or NET)", config.SubsysInit.Attr())
		}
	}
	// Flags and device structures. When ranks run in other processes the
	// flags are a page of shared memory that those of this machine map,
	// to end this rank's kernels should its process die (peerabort.go).
	if err := c.allocFlags(ctx, net, tpeers); err != nil {
		return fail(err)
	}
	var direct []uint64
	across := false
	if tp.Direct || directCandidate(tpeers) { // direct.go; every rank has rank 0's answer and the same peers
		c.ipc = c.cctx
		if direct, across, err = c.setupDirect(ctx, net, tpeers, tp.Direct, directAcross(tpeers, c.layout, s.Config.P2PDisable)); err != nil {
			return fail(err)
		}
	}
	dimg, err := transport.BuildImage(transport.ImageSpec{Rank: rank, NRanks: n, NChannels: c.nChannels,
		Rings: c.rings, Trees: c.trees, Conns: c.conns,
		AbortFlag: uint64(c.flagsDev), ErrorFlag: uint64(c.flagsDev) + errorFlagOffset, Sizes: sizes,
		Direct: direct, DirectFlags: directFlags(c.layout, across), DirectWindows: across})
	if err != nil {
		return fail(err)
	}
	if c.devMem, err = c.cctx.MemAlloc(uint64(dimg.Size())); err != nil {
		return fail(err)
	}
	img := dimg.Relocate(uint64(c.devMem))
	if across {
		// DIRECT across processes (direct.go): the communicator's tuner
		// has its LL one-shot AllReduce, which needs only the mailboxes;
		// the window tuner has all of DIRECT, for calls on windows
		// (window.go). across is the same on every rank (setupDirect), so
		// every rank's tuners are.
		tp = llAcrossTopology(tp, across)
		if c.tuner, err = newTuner(tp); err != nil {
			return fail(err)
		}
		c.win.table = c.devMem + cuda.DevicePtr(dimg.WindowTableOffset())
		wtp := tp
		wtp.Direct = true
		if c.winTuner, err = newTuner(wtp); err != nil {
			return fail(err)
		}
		c.log.Info(fmt.Sprintf("DIRECT across processes: AllReduce's LL one-shot up to %d bytes on any buffers; all of DIRECT on calls whose buffers lie in registered windows",
			c.tuner.DirectLLLimit()), config.SubsysInit.Attr())
	}
	if err := c.cctx.MemcpyHtoD(c.devMem, unsafe.Pointer(&img[0]), uint64(len(img))); err != nil {
		return fail(err)
	}
	c.launcher = enqueue.NewLauncher(c.cctx, uint64(c.devMem), func(f kspace.Func) (*cuda.Function, error) {
		e, err := c.kset.Lookup(f)
		if err != nil {
			return nil, err
		}
		return e.Kernel, nil
	})
	c.launcher.Log = c.log // says once when captured FIFOs must wait for Destroy
	c.launcher.Programmatic = programmaticFor(c.s.Programmatic, tpeers, rank, c.gpu.CCMajor)
	c.launcher.CapturedProgrammatic = capturedProgrammaticFor(c.s.Programmatic, c.gpu.CCMajor)
	c.launcher.LaunchGraphs = c.s.KernelGraphs != KernelGraphsOff
	c.launcher.JoinGraphs = c.s.KernelGraphs == KernelGraphsJoins
	c.launcher.OnePassAllReduce = c.s.OnePass
	if c.launcher.Programmatic || c.launcher.CapturedProgrammatic {
		// The GPU's co-resident blocks as the channels were sized for.
		c.launcher.TriggerEarlyBlocks = triggerEarlyBlocks(c.s.TriggerEarly, c.nChannels, agreed.SMs*agreed.BlocksPerSM, agreed.RanksPerGPU)
	}
	// Ranks of other processes are watched from now on.
	if err := c.watchPeers(ctx, tpeers); err != nil {
		return fail(err)
	}
	// What this rank set up on its device went through the legacy stream
	// (cuMemsetD8 zeroing FIFOs and flags, cuMemcpyHtoD of the device
	// image), which is asynchronous with respect to the host and not
	// ordered with the non-blocking streams that kernels run on: it must
	// have landed before any peer launches, or a peer's first writes into
	// a FIFO can be wiped by the zeroing still queued behind them.
	if err := cuda.WrapStream(c.cctx, 0).Synchronize(); err != nil {
		return fail(fmt.Errorf("waiting for the device setup: %w", err))
	}
	// Everyone is set up before anyone launches.
	if err := net.Barrier(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

// checkSharedGPUs refuses ranks of different processes on one GPU unless
// MPS runs. Every rank sees the same peers, so every rank refuses alike.
func checkSharedGPUs(peers []transport.Peer, mps bool) error {
	if mps {
		return nil
	}
	for a := range peers {
		for b := a + 1; b < len(peers); b++ {
			p, q := peers[a], peers[b]
			if !p.SameProcess(q) && p.SameGPU(q) {
				return fmt.Errorf("rank %d (pid %d) and rank %d (pid %d) both use GPU %d (%s) on %s: %w",
					a, p.PID, b, q.PID, p.Device, p.BusID, p.Host, ErrSharedGPUNeedsMPS)
			}
		}
	}
	return nil
}

// linkFunc tells transport.Connect what joins rank's GPU to each peer's:
// the same GPU (LOC), NVLink (NVL, direct or through NVSwitch), other peer
// access (taken as PXB, within NCCL's default P2P level), or none.
func linkFunc(l topo.Layout, rank int, peers []transport.Peer) func(p int) transport.Link {
	return func(p int) transport.Link {
		if peers[rank].SameGPU(peers[p]) {
			return transport.Link{Path: transport.PathLOC, PeerAccess: true}
		}
		i, j := l.GPUOf[rank], l.GPUOf[p]
		switch l.LinkBetween(i, j) {
		case topo.LinkSame:
			return transport.Link{Path: transport.PathLOC, PeerAccess: true}
		case topo.LinkNone:
			return transport.Link{Path: transport.PathSYS}
		}
		nvl := l.NVLinks != nil && l.NVLinks[i][j] > 0 ||
			l.SwitchLinks != nil && l.SwitchLinks[i] > 0 && l.SwitchLinks[j] > 0
		if nvl {
			return transport.Link{Path: transport.PathNVL, PeerAccess: true}
		}
		return transport.Link{Path: transport.PathPXB, PeerAccess: true}
	}
}

func joinInts[T ~int | ~int32](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}

// Edges lists the connections rank plan.Rank takes part in: on every
// channel its ring neighbours and tree neighbours (both directions), and
// the point-to-point peers at the distances that use the channel.
func edges(plan enqueue.Comm, rings [][]int, trees []graph.Tree) []transport.Edge {
	me, n := plan.Rank, plan.NRanks
	var out []transport.Edge
	add := func(ch, from, to int) {
		if from != to && from >= 0 && to >= 0 {
			out = append(out, transport.Edge{Channel: ch, From: from, To: to})
		}
	}
	for ch := range plan.NChannels {
		if n == 1 {
			break
		}
		if ch < len(rings) {
			prev, next, _, _ := graph.RingView(rings[ch], me)
			add(ch, me, next)
			add(ch, prev, me)
		}
		if ch < len(trees) {
			t := trees[ch]
			if up := t.Up[me]; up >= 0 {
				add(ch, me, up)
				add(ch, up, me)
			}
			for _, d := range t.Children(me) {
				add(ch, me, d)
				add(ch, d, me)
			}
		}
	}
	for d := 1; d < n; d++ {
		for _, ch := range enqueue.P2PChannels(plan, d) {
			add(ch, me, (me+d)%n)
			add(ch, (me-d+n)%n, me)
		}
	}
	slices.SortFunc(out, func(a, b transport.Edge) int {
		return slices.Compare([]int{a.Channel, a.From, a.To}, []int{b.Channel, b.From, b.To})
	})
	return slices.Compact(out)
}

// ignoredSettings says which of cfg's NCCL settings, set away from their
// defaults, have no effect in ncclgo (an NCCL user would expect one).
func ignoredSettings(cfg config.Config) []string {
	var out []string
	if cfg.LaunchMode == config.LaunchGroup {
		out = append(out, "NCCL_LAUNCH_MODE=GROUP has no effect: ncclgo launches the ranks of a group that share a GPU together anyway (NCCLGO_ONE_LAUNCH)")
	}
	if cfg.IBDisable {
		out = append(out, "NCCL_IB_DISABLE=1 has no effect: ncclgo has no InfiniBand transport of its own (NCCL_NET_PLUGIN=none keeps a net plugin from loading)")
	}
	return out
}
