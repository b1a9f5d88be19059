package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Sizes are the FIFO sizes in bytes, per protocol (LL, LL128, SIMPLE).
type Sizes [3]uint32

// Validate checks the sizes against the device library's requirements
// (devicesrc/ng_prims.h): every FIFO splits into generated.Steps slots of
// whole lines; SIMPLE a multiple of 1024 bytes, LL of 1024, LL128 of 2048.
// LL128 may be 0: no LL128 FIFOs, for a communicator that never runs
// LL128 (one across hosts: its lines cannot cross host memory whole).
func (s Sizes) Validate() error {
	names := [3]string{"LL", "LL128", "SIMPLE"}
	mult := [3]uint32{1024, 2048, 1024}
	for p, n := range s {
		if p == 1 && n == 0 {
			continue
		}
		if n == 0 || n%mult[p] != 0 {
			want := "a positive multiple"
			if p == 1 {
				want = "0 or a multiple"
			}
			return fmt.Errorf("transport: %s buffer of %d bytes: want %s of %d", names[p], n, want, mult[p])
		}
	}
	return nil
}

// NoLL128 reports whether s has no LL128 FIFOs (Validate).
func (s Sizes) NoLL128() bool { return s[1] == 0 }

// Edge is one direction of a connection on one channel.
type Edge struct{ Channel, From, To int }

func (e Edge) String() string { return fmt.Sprintf("ch%d %d->%d", e.Channel, e.From, e.To) }

// Key names one side of a connection from one rank's point of view.
type Key struct{ Channel, Peer int }

// Layout of a receiver's control block.
const (
	offHead        = 0
	offTail        = 64
	offRecvStep    = 128
	offPtrExchange = 192
	ctrlBytes      = 256
	fifoAlign      = 4096
)

func roundUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// Options are the choices Connect leaves to its caller.
type Options struct {
	// Policy is what the user allows; the zero Policy allows everything.
	Policy Policy
	// Link reports what joins rank me's GPU to rank peer's. Nil: every GPU
	// reaches every other (PathPXB with peer access; PathLOC on one GPU).
	Link func(peer int) Link
	// Transports are tried in order; nil means Default().
	Transports []Transport
	// Log receives one line per connection this rank sends on, in NCCL's
	// words ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"). May be nil.
	Log func(line string)
	// ProxyError is called, on the proxy's goroutine, when a connection
	// that the proxy drives (NET) fails: its peer vanished or broke the
	// protocol. The kernels that wait on it would wait forever: the caller
	// aborts them. May be nil.
	ProxyError func(err error)
	// Aborted reports whether the caller aborted the kernels that use the
	// connections: Set.Close then closes NET senders at once, without
	// letting their proxy ship what the kernels posted. May be nil.
	Aborted func() bool
	// AbortCause says why the caller aborted, once Aborted reports true:
	// NET tells its peers, in the goodbye it sends at once, so that their
	// errors name this rank and the cause. May be nil.
	AbortCause func() error
	// NetLog receives NET's per-connection lines (the NET/stats summary
	// each connection logs when it closes, at Info), so that they go where
	// the communicator's log goes (NCCL_DEBUG_FILE). Nil: the process's
	// NET logger (runtime/net.Logger, standard error).
	NetLog *slog.Logger
}

// Set is one rank's connections. Send[k] is the ConnInfo of the sending
// side towards peer k.Peer on channel k.Channel, Recv[k] that of the
// receiving side from k.Peer. Via[k] names the transport of Send[k] as the
// logs do ("P2P/CUMEM").
type Set struct {
	Send map[Key]generated.ConnInfo
	Recv map[Key]generated.ConnInfo
	Via  map[Key]string

	used    map[string]bool // transports of any rank's connections
	mem     Memory
	allocs  []cuda.DevicePtr
	regions []Region
	bytes   uint64
}

// Uses reports whether any connection of the communicator, on any rank,
// goes through the transport named name ("P2P", "SHM"). Every rank gets
// the same answer, so it may decide things all ranks must agree on (the
// protocols: LL128 is unsafe through host memory).
func (s *Set) Uses(name string) bool { return s.used[name] }

// Bytes is the device (or pinned host) memory the set allocated.
func (s *Set) Bytes() uint64 { return s.bytes }

// ErrNoTransport is wrapped by Connect's error when no transport joins two
// ranks: only with Options.Transports that leave NET out, as NET connects
// any two ranks.
var ErrNoTransport = errors.New("no transport connects these ranks")

// wireRegion is what a receiver publishes about the connections from one
// sender.
type wireRegion struct {
	From      int
	Transport string
	Info      []byte
	Flags     uint32
	Edges     []wireEdge
}

type wireEdge struct {
	Channel int
	Off     uint64
}

// wireRank is one rank's block of the exchange.
type wireRank struct {
	Server  string // descriptor server's ipc address, secret included ("" when it exported none)
	Regions []wireRegion
}

// Connect sets up the connections of rank me. peers describes every rank;
// edges lists every connection that rank me takes part in (From == me or
// To == me); every rank calls Connect at the same time, with edge lists
// that agree (an edge me->p here must be p's edge me->p).
func Connect(ctx context.Context, net bootstrap.Network, mem Memory, me int, peers []Peer, edges []Edge, sizes Sizes,
	opts Options) (_ *Set, err error) {
	if err := sizes.Validate(); err != nil {
		return nil, err
	}
	if len(peers) != net.Size() {
		return nil, fmt.Errorf("transport: %d peer descriptions for %d ranks", len(peers), net.Size())
	}
	if me < 0 || me >= len(peers) {
		return nil, fmt.Errorf("transport: rank %d out of range [0, %d)", me, len(peers))
	}
	ts := opts.Transports
	if ts == nil {
		ts = Default()
	}
	byName := map[string]Transport{}
	for _, t := range ts {
		byName[t.Name()] = t
	}
	self := peers[me]
	env := &Env{Mem: mem, Rank: me, Self: self, Policy: opts.Policy}
	set := &Set{Send: map[Key]generated.ConnInfo{}, Recv: map[Key]generated.ConnInfo{}, Via: map[Key]string{}, used: map[string]bool{}, mem: mem}
	defer func() {
		if cerr := env.closeServer(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = set.Close()
		}
	}()
	link := func(p int) Link {
		if opts.Link != nil {
			return opts.Link(p)
		}
		if self.SameGPU(peers[p]) {
			return Link{Path: PathLOC, PeerAccess: true}
		}
		return Link{Path: PathPXB, PeerAccess: true}
	}

	// The per-connection block: control words, then the FIFOs.
	fifo, total := blockLayout(sizes)
	env.sizes, env.proxyError, env.aborted, env.abortCause = sizes, opts.ProxyError, opts.Aborted, opts.AbortCause
	env.netLog = opts.NetLog
	edges = slices.Clone(edges)
	slices.SortFunc(edges, func(a, b Edge) int {
		return slices.Compare([]int{a.Channel, a.From, a.To}, []int{b.Channel, b.From, b.To})
	})
	edges = slices.Compact(edges)
	inbound := map[int][]int{} // sender -> channels, ascending
	nSend := 0
	for _, e := range edges {
		switch {
		case e.From == e.To:
			return nil, fmt.Errorf("transport: edge %v connects rank %d to itself", e, e.From)
		case e.From < 0 || e.From >= len(peers) || e.To < 0 || e.To >= len(peers):
			return nil, fmt.Errorf("transport: edge %v names a rank outside [0, %d)", e, len(peers))
		case e.To == me:
			inbound[e.From] = append(inbound[e.From], e.Channel)
		case e.From == me:
			nSend++
		default:
			return nil, fmt.Errorf("transport: edge %v does not involve rank %d", e, me)
		}
	}

	// Receiving ends: one region per sender.
	var mine wireRank
	for _, from := range slices.Sorted(maps.Keys(inbound)) {
		t, err := Select(ts, opts.Policy, peers[from], self, link(from))
		if err != nil {
			return nil, fmt.Errorf("transport: rank %d receiving from rank %d: %w", me, from, err)
		}
		chans := inbound[from]
		r, err := t.SetupRecv(env, peers[from], uint64(len(chans))*total)
		if err != nil {
			return nil, fmt.Errorf("transport: %s buffers for rank %d's connections from rank %d: %w", t.Name(), me, from, err)
		}
		set.regions = append(set.regions, r)
		set.bytes += uint64(len(chans)) * total
		w := wireRegion{From: from, Transport: t.Name(), Info: r.Info(), Flags: t.Flags(peers[from], self)}
		for i, ch := range chans {
			off := uint64(i) * total
			w.Edges = append(w.Edges, wireEdge{Channel: ch, Off: off})
			base := r.Addr() + off
			set.Recv[Key{ch, from}] = connInfo(base, base+offRecvStep, fifo, sizes, w.Flags)
		}
		mine.Regions = append(mine.Regions, w)
	}
	// The senders' step words, one 64-byte line each, in this rank's memory.
	var sendSteps uint64
	if nSend > 0 {
		p, err := allocZeroed(mem, uint64(nSend)*64)
		if err != nil {
			return nil, fmt.Errorf("transport: send step words: %w", err)
		}
		set.allocs = append(set.allocs, p)
		set.bytes += uint64(nSend) * 64
		sendSteps = uint64(p)
	}

	mine.Server = env.serverAddr()
	blob, err := json.Marshal(mine)
	if err != nil {
		return nil, fmt.Errorf("transport: encoding: %w", err)
	}
	all, err := net.AllGather(ctx, blob)
	if err != nil {
		return nil, fmt.Errorf("transport: exchanging connection info: %w", err)
	}
	if len(all) != len(peers) {
		return nil, fmt.Errorf("transport: exchanging connection info: %d blocks for %d ranks", len(all), len(peers))
	}
	ranks := make([]wireRank, len(all))
	names := make([]string, len(all))
	anyServer := false
	for r, b := range all {
		if err := json.Unmarshal(b, &ranks[r]); err != nil {
			return nil, fmt.Errorf("transport: decoding rank %d's connection info: %w", r, err)
		}
		names[r] = ranks[r].Server
		anyServer = anyServer || names[r] != ""
		for _, w := range ranks[r].Regions {
			set.used[w.Transport] = true
		}
	}
	env.setNames(names)

	// Sending ends: map every receiver's region for this rank.
	type chanOf struct{ to, ch int }
	sendsOn := map[chanOf]bool{}
	for _, e := range edges {
		if e.From == me {
			sendsOn[chanOf{e.To, e.Channel}] = true
		}
	}
	published := map[chanOf]uint64{} // base address here
	via := map[int]string{}
	flagsTo := map[int]uint32{}
	for to, rk := range ranks {
		for _, w := range rk.Regions {
			if w.From != me {
				continue
			}
			if _, dup := via[to]; dup {
				return nil, fmt.Errorf("transport: rank %d published two regions for rank %d's connections to it", to, me)
			}
			t, ok := byName[w.Transport]
			if !ok {
				return nil, fmt.Errorf("transport: rank %d chose transport %q for rank %d's connections, which rank %d lacks", to, w.Transport, me, me)
			}
			if ok, why := t.CanConnect(opts.Policy, self, peers[to], link(to)); !ok {
				return nil, fmt.Errorf("transport: rank %d chose %s for rank %d's connections to it, which rank %d cannot use: %s", to, t.Name(), me, me, why)
			}
			// The flags decide how the kernels reach the peer (direct
			// pointers, fence scope): both sides must have derived the same.
			if f := t.Flags(self, peers[to]); w.Flags != f {
				return nil, fmt.Errorf("transport: rank %d published flags %#x for rank %d's %s connections to it, where rank %d derives %#x", to, w.Flags, me, t.Name(), me, f)
			}
			r, err := t.ConnectSend(ctx, env, to, peers[to], w.Info)
			if err != nil {
				return nil, fmt.Errorf("transport: rank %d connecting to rank %d through %s: %w", me, to, t.Name(), err)
			}
			set.regions = append(set.regions, r)
			via[to] = t.Name() + "/" + r.Mode()
			flagsTo[to] = w.Flags
			for _, e := range w.Edges {
				k := chanOf{to, e.Channel}
				_, seen := published[k]
				switch {
				case !sendsOn[k]:
					return nil, fmt.Errorf("transport: rank %d published a connection from rank %d on channel %d, on which rank %d sends it nothing", to, me, e.Channel, me)
				case seen:
					return nil, fmt.Errorf("transport: rank %d published rank %d's connection on channel %d twice", to, me, e.Channel)
				}
				if sr, ok := r.(sizedRegion); ok && (e.Off > sr.mappedSize() || total > sr.mappedSize()-e.Off) {
					return nil, fmt.Errorf("transport: rank %d placed rank %d's connection on channel %d at offset %d of a %d-byte region, which cannot hold its %d bytes",
						to, me, e.Channel, e.Off, sr.mappedSize(), total)
				}
				published[k] = r.Addr() + e.Off
			}
		}
	}
	si := 0
	for _, e := range edges {
		if e.From != me {
			continue
		}
		base, ok := published[chanOf{e.To, e.Channel}]
		if !ok {
			return nil, fmt.Errorf("transport: connection %v: rank %d did not set it up (the ranks disagree on the channels' graphs)", e, e.To)
		}
		k := Key{e.Channel, e.To}
		set.Send[k] = connInfo(base, sendSteps+uint64(si)*64, fifo, sizes, flagsTo[e.To])
		set.Via[k] = via[e.To]
		si++
		if opts.Log != nil {
			opts.Log(fmt.Sprintf("Channel %02d/0 : %d[%d] -> %d[%d] via %s", e.Channel, me, self.Device, e.To, peers[e.To].Device, via[e.To]))
		}
	}
	// NET connections are up once the proxy completed their handshakes.
	for _, r := range set.regions {
		if nr, ok := r.(*netRegion); ok {
			if err := nr.waitReady(ctx); err != nil {
				return nil, err
			}
		}
	}
	// Descriptors are handed out until every rank has mapped its peers'
	// memory; then the servers close (the deferred closeServer). NET
	// connections of every rank are up.
	if anyServer || set.used["NET"] {
		if err := net.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("transport: waiting for the peers to map the buffers: %w", err)
		}
	}
	return set, nil
}

// sizedRegion is a Region mapped from a peer's description whose length
// this process knows, so that the peer's offsets can be checked.
type sizedRegion interface {
	Region
	mappedSize() uint64
}

// connInfo is the ConnInfo of one connection whose receiver's block starts
// at base; step is this side's step word.
func connInfo(base, step uint64, fifo [3]uint64, sizes Sizes, flags uint32) generated.ConnInfo {
	c := generated.ConnInfo{Head: base + offHead, Tail: base + offTail, Step: step, PtrExchange: base + offPtrExchange,
		BuffSizes: sizes, Flags: flags}
	for p := range fifo {
		c.Buffs[p] = base + fifo[p]
	}
	return c
}

// Close frees the set's memory and mappings. The kernels that use it must
// be done.
func (s *Set) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for i := len(s.regions) - 1; i >= 0; i-- {
		errs = append(errs, s.regions[i].Close())
	}
	s.regions = nil
	for _, p := range s.allocs {
		errs = append(errs, s.mem.MemFree(p))
	}
	s.allocs = nil
	s.bytes = 0
	return errors.Join(errs...)
}
