package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/envint"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
	"github.com/ncclgo/ncclgo/runtime/proxy"
)

// NET connects ranks through a network (runtime/net: the socket backend),
// with the proxy (runtime/proxy) moving each step.
//
// Each side of a connection has a staging block in host memory that the
// driver allocates page-locked and mapped for its GPU (cuMemHostAlloc, as
// NCCL's host buffers: its mapping lives with the CUDA context, not with
// the process's address space, so a killed process's kernel still
// spinning on it does not fault the GPU, which under MPS every client of
// the GPU would get), with the layout of a receiver's block
// (control words, then the FIFOs): the sending kernel writes its steps into
// its own staging block exactly as it writes into an SHM receiver's (head,
// tail, the LL flags), and the receiving kernel reads its own; the device
// code is the SHM code. The proxy of the sending process ships every step
// that the kernel posted (a SIMPLE step when tail passes it, as many bytes
// as the kernel stored in the step's size word, NG_CONN_STEP_SIZES; LL
// lines as their flags turn valid, up to the line count of the step's
// size word) to the peer's proxy, which writes it
// into the receiving staging block (SIMPLE: then tail), and returns the
// receiving kernel's head to the sender's proxy as credits, which it
// stores into the sending block's head. LL128 cannot go through host
// memory (its 128-byte lines do not land whole), so communicators with NET
// connections keep it off, as with SHM.
//
// Every message from the peer is checked: its kind, connection, step
// (within the window that the receiver's head allows), offset and length
// (within the slot); credits may only grow, and by at most a FIFO's depth.
// An LL receiver does not wait for a step of no lines, so its head may
// run ahead of the steps the sender posted (over a collective's steps on a
// channel that carries none of its data); its proxy then credits in
// strides of a FIFO's depth.
// Anything else fails the connection with an error naming the peer.
//
// Each side says goodbye when it closes. A clean goodbye (a sender's
// after its proxy shipped what the kernels posted; a receiver's after it
// credited what they consumed) ends the connection quietly. A side whose
// caller aborted (Options.Aborted) says goodbye at once, from the proxy,
// with "rank N aborted: <cause>" (Options.AbortCause), as does a side
// whose connection failed, with its error: the peer's connection fails at
// once with that reason (ErrPeerAborted), reported through
// Options.ProxyError, so that its caller's kernels do not wait on it for
// ever (runtime/comm aborts when work of its may need the connection, and
// otherwise fails its next call). A peer that vanishes (EOF) fails it too.
type NET struct {
	// Net is the network; nil means the process's default (DefaultNet).
	Net ncclnet.Net
	// Dev is the network device to use.
	Dev int
	// SetupTimeout bounds the handshake of a connection (the peer's
	// accept and credit connection); 0 means DefaultNetSetupTimeout.
	SetupTimeout time.Duration

	knobs *netKnobs // tests; nil: the environment's (netKnobsFromEnv)
}

// netKnobs are the NET proxy's pipeline settings. Each has an environment
// variable, read once per process (loadNetKnobs):
//
//   - NCCLGO_NET_RECV_AHEAD (1..16, default 8): payloads the receiving
//     proxy keeps posted at once (recvAhead);
//   - NCCLGO_NET_SEND_PAIRS (1..16, default 16): header+payload pairs the
//     sending proxy keeps posted at once (each pair holds two of the
//     comm's ncclnet.MaxRequests requests);
//   - NCCLGO_NET_CREDIT_BATCH (1..8, default 4): consumed steps past the
//     last credit after which the receiver credits a connection (it
//     credits earlier when the sender is within creditNear slots of
//     stalling).
type netKnobs struct {
	recvAhead, sendPairs int
	creditBatch          uint64
}

// defaultNetKnobs are the settings without the variables.
var defaultNetKnobs = netKnobs{recvAhead: recvAhead, sendPairs: maxPairs, creditBatch: creditBatch}

// netKnobsFromEnv reads the NET proxy's settings through getenv; an
// ill-formed or out-of-range value is an error naming the variable, its
// value and the valid range.
func netKnobsFromEnv(getenv func(string) string) (netKnobs, error) {
	k := defaultNetKnobs
	for _, v := range []struct {
		name     string
		set      func(int)
		min, max int
		def      int
	}{
		{"NCCLGO_NET_RECV_AHEAD", func(n int) { k.recvAhead = n }, 1, maxPairs, recvAhead},
		{"NCCLGO_NET_SEND_PAIRS", func(n int) { k.sendPairs = n }, 1, maxPairs, maxPairs},
		{"NCCLGO_NET_CREDIT_BATCH", func(n int) { k.creditBatch = uint64(n) }, 1, generated.Steps, creditBatch},
	} {
		n, ok, err := envint.Get(getenv, v.name, "an integer", v.min, v.max)
		if err != nil {
			return defaultNetKnobs, fmt.Errorf("transport: %w (default %d)", err, v.def)
		}
		if ok {
			v.set(n)
		}
	}
	return k, nil
}

var netEnv struct {
	once  sync.Once
	knobs netKnobs
	err   error
}

// loadNetKnobs is netKnobsFromEnv of the process's environment, read once.
func loadNetKnobs() (netKnobs, error) {
	netEnv.once.Do(func() { netEnv.knobs, netEnv.err = netKnobsFromEnv(os.Getenv) })
	return netEnv.knobs, netEnv.err
}

func (t NET) netKnobs() (netKnobs, error) {
	if t.knobs != nil {
		return *t.knobs, nil
	}
	return loadNetKnobs()
}

// DefaultNetSetupTimeout bounds a NET connection's handshake.
const DefaultNetSetupTimeout = 2 * time.Minute

var defaultNet struct {
	once sync.Once
	net  ncclnet.Net
	err  error
}

// DefaultNet is the process's network, as ncclnet.FromEnv chooses it from
// the environment: an NCCL net plugin (NCCL_NET_PLUGIN; unset tries
// libnccl-net.so) or the socket backend. It is made once.
func DefaultNet() (ncclnet.Net, error) {
	defaultNet.once.Do(func() { defaultNet.net, defaultNet.err = ncclnet.FromEnv(os.Getenv) })
	return defaultNet.net, defaultNet.err
}

// Name implements Transport.
func (NET) Name() string { return "NET" }

// CanConnect implements Transport: NET connects any two ranks (it comes
// last: P2P and SHM are preferred where they can).
func (NET) CanConnect(Policy, Peer, Peer, Link) (bool, string) { return true, "" }

// Flags implements Transport: the FIFOs are host memory, and the sending
// kernel publishes each SIMPLE step's size (so that the proxy ships only
// the bytes the step holds).
func (NET) Flags(send, recv Peer) uint32 { return generated.ConnStepSizes }

// offStepSizes is where, in a sender's staging block, the kernel stores
// the size word of step s: a uint32 at offStepSizes + 4*(s % Steps),
// right behind tail (NG_CONN_STEP_SIZES). A SIMPLE step's word is its
// byte count; an LL step's is llSizeWord.
const offStepSizes = offTail + 8

// The LL size word (NG_STEP_SIZE_LL): the flag bit, the step's low
// llTagBits bits at llTagShift, the line count below.
const (
	llTagShift = 20
	llTagBits  = 11
	llMaxLines = 1<<llTagShift - 1
)

// llSizeWord is the size word of LL step s of the given lines, as the
// kernel stores it (devicesrc/ng_prims.h).
func llSizeWord(s uint64, lines int) uint32 {
	return generated.StepSizeLl | uint32(s&(1<<llTagBits-1))<<llTagShift | uint32(lines)&llMaxLines
}

// llSizeOf decodes w as the size word of LL step s: its line count, and
// whether w is that (a SIMPLE step's count or an LL word of another step
// is not).
func llSizeOf(w uint32, s uint64) (lines int, ok bool) {
	if w&generated.StepSizeLl == 0 || (w>>llTagShift)&(1<<llTagBits-1) != uint32(s&(1<<llTagBits-1)) {
		return 0, false
	}
	return int(w & llMaxLines), true
}

func (t NET) net() (ncclnet.Net, error) {
	if t.Net != nil {
		return t.Net, nil
	}
	return DefaultNet()
}

func (t NET) setupTimeout() time.Duration {
	if t.SetupTimeout > 0 {
		return t.SetupTimeout
	}
	return DefaultNetSetupTimeout
}

// hostMemory is what NET needs of a rank's memory: page-locked host
// memory mapped for its GPU. *cuda.Context implements it.
type hostMemory interface {
	MemAllocHost(n uint64) (unsafe.Pointer, error)
	MemFreeHost(p unsafe.Pointer) error
	HostDevicePointer(p unsafe.Pointer) (cuda.DevicePtr, error)
}

var _ hostMemory = (*cuda.Context)(nil)

// The NET connect info: the region's size, then the listen handle.
const netInfoSize = 8 + ncclnet.HandleSize

// SetupRecv implements Transport: the receiving staging block, a listener,
// and the proxy connection that accepts the sender and then runs.
func (t NET) SetupRecv(env *Env, send Peer, size uint64) (_ Region, err error) {
	n, err := t.net()
	if err != nil {
		return nil, err
	}
	r, err := newNetRegion(env, t, n, size, fmt.Sprintf("rank %d receiving from %s", env.Rank, send))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	h, l, err := n.Listen(t.Dev)
	if err != nil {
		return nil, fmt.Errorf("transport: NET listen on %s device %d: %w", n.Name(), t.Dev, err)
	}
	r.pc.listener = l
	r.info = binary.LittleEndian.AppendUint64(nil, r.size)
	r.info = append(r.info, h[:]...)
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

// ConnectSend implements Transport: the sending staging block, the
// connection to the receiver, a listener for its credits, and the proxy
// connection.
func (t NET) ConnectSend(ctx context.Context, env *Env, recv int, peer Peer, info []byte) (_ Region, err error) {
	peer.Rank = recv
	if len(info) != netInfoSize {
		return nil, fmt.Errorf("transport: NET connect info from rank %d: %d bytes, want %d", recv, len(info), netInfoSize)
	}
	size := binary.LittleEndian.Uint64(info)
	var h ncclnet.Handle
	copy(h[:], info[8:])
	n, err := t.net()
	if err != nil {
		return nil, err
	}
	if _, total := blockLayout(env.sizes); size == 0 || size%total != 0 || size/total > generated.MaxChannels {
		return nil, fmt.Errorf("transport: NET connect info from rank %d: a region of %d bytes, want 1 to %d connections of %d bytes", recv, size, generated.MaxChannels, total)
	}
	r, err := newNetRegion(env, t, n, size, fmt.Sprintf("rank %d sending to %s", env.Rank, peer))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	pc := r.pc
	pc.sender = true
	for pc.send == nil {
		if pc.send, err = n.Connect(t.Dev, h); err != nil {
			return nil, fmt.Errorf("transport: NET connecting to rank %d: %w", recv, err)
		}
		if pc.send == nil {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("transport: NET connecting to rank %d: %w", recv, context.Cause(ctx))
			case <-time.After(100 * time.Microsecond):
			}
		}
	}
	ch, l, err := n.Listen(t.Dev)
	if err != nil {
		return nil, fmt.Errorf("transport: NET listen for rank %d's credits: %w", recv, err)
	}
	pc.listener = l
	copy(pc.scratch[scrHandle:], ch[:])
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

// blockLayout is the layout of one connection's block: the FIFOs' offsets
// and the block's size.
func blockLayout(sizes Sizes) (fifo [3]uint64, total uint64) {
	total = roundUp(ctrlBytes, fifoAlign)
	for p, n := range sizes {
		fifo[p] = total
		total = roundUp(total+uint64(n), fifoAlign)
	}
	return fifo, total
}

// netRegion is one side of the NET connections between two ranks: the
// staging blocks and the proxy connection that serves them.
type netRegion struct {
	mem   hostMemory
	eng   *proxy.Engine
	host  []byte // the staging blocks (MemAllocHost)
	size  uint64
	addr  cuda.DevicePtr
	info  []byte
	alloc bool // host is MemAllocHost's
	pc    *netConn
	// aborted is Options.Aborted (nil: never): Close does not drain.
	aborted func() bool
}

// Scratch memory of a proxy connection (mmap'd, so that plugins may keep
// pointers into it): the credit listener's handle, the message slots
// (a header and an inline payload each), the credits, then the bounce
// buffers of LL payloads that travel apart.
const (
	scrHandle = 0
	hdrSize   = 32
	// inlineStep is the largest step payload that rides in its header's
	// message (one writev, one read: a small step's hop); a longer one
	// follows its header as a message of its own, which the receiver
	// posts straight into the slot (SIMPLE) or a bounce buffer (LL).
	inlineStep = 4096
	msgSlot    = hdrSize + inlineStep
	scrHeaders = scrHandle + ncclnet.HandleSize
	maxPairs   = ncclnet.MaxRequests / 2       // header+payload sends in flight
	scrCredits = scrHeaders + maxPairs*msgSlot // the credit received (or a goodbye with its reason)
	creditSize = 16
	maxCredits = 8
	scrCredOut = scrCredits + creditSize + byeReasonMax // the credits sent
	scrBye     = scrCredOut + maxCredits*creditSize
	scrBounce  = (scrBye + hdrSize + byeReasonMax + 4095) / 4096 * 4096
	// recvAhead is how many payloads the receiver has posted at once (each
	// in a message slot of its own, or with its own bounce buffer), so
	// that the next step's header and bytes are taken while a step's
	// chunks are still arriving: the default of NCCLGO_NET_RECV_AHEAD,
	// whose maximum is maxPairs (the message slots).
	recvAhead = 8
	// Credits. The receiver returns a connection's head (its kernel's
	// consumed steps) once creditBatch steps are consumed past the last
	// credit, or, when the sender is within creditNear free slots of
	// stalling (as the headers that arrived tell), once any is. The sender
	// reads its credit socket only in that second case (the credit is
	// usually there by then) and every creditPoll passes (to see a bad
	// credit, the receiver's goodbye or its death without a full window).
	// The sender can then stall only on steps its receiver has not
	// consumed, as with a credit per step; over a ping of single steps
	// both proxies spend a system call on credits once per creditBatch
	// steps, not once per step.
	// creditBatch is NCCLGO_NET_CREDIT_BATCH's default.
	creditBatch = generated.Steps / 2
	creditNear  = 2
	creditPoll  = 64
)

func newNetRegion(env *Env, t NET, n ncclnet.Net, size uint64, name string) (_ *netRegion, err error) {
	m, ok := env.Mem.(hostMemory)
	if !ok {
		return nil, fmt.Errorf("transport: NET needs host memory registration, which %T lacks", env.Mem)
	}
	fifo, total := blockLayout(env.sizes)
	if size == 0 || size%total != 0 {
		return nil, fmt.Errorf("transport: NET region of %d bytes: not a whole number of %d-byte connections", size, total)
	}
	knobs, err := t.netKnobs()
	if err != nil {
		return nil, err
	}
	if _, err := proxy.EnvPolicy(); err != nil {
		return nil, err
	}
	page := uint64(os.Getpagesize())
	size = roundUp(size, page)
	r := &netRegion{mem: m, size: size, aborted: env.aborted}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	p, err := m.MemAllocHost(size)
	if err != nil {
		return nil, fmt.Errorf("transport: NET staging of %d bytes: %w", size, err)
	}
	r.host, r.alloc = unsafe.Slice((*byte)(p), size), true
	clear(r.host) // the counters start at 0; cuMemHostAlloc does not zero
	if r.addr, err = m.HostDevicePointer(unsafe.Pointer(&r.host[0])); err != nil {
		return nil, err
	}
	llSlot := uint64(env.sizes[0]) / generated.Steps
	scratch, err := syscall.Mmap(-1, 0, int(roundUp(scrBounce+uint64(knobs.recvAhead)*llSlot, page)), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("transport: NET scratch: %w", err)
	}
	r.pc = &netConn{name: name, net: n, dev: t.Dev, host: r.host, scratch: scratch, fifo: fifo, total: total,
		nconn: int(size / total), sizes: env.sizes, deadline: time.Now().Add(t.setupTimeout()), onErr: env.proxyError,
		rank: env.Rank, aborted: env.aborted, cause: env.abortCause, knobs: knobs, log: env.netLog,
		llSizes: t.Flags(Peer{}, Peer{})&generated.ConnStepSizes != 0}
	r.pc.initState()
	return r, nil
}

// start hands the connection to the process's proxy.
func (r *netRegion) start() error {
	r.eng = proxy.Acquire()
	return r.eng.Add(context.Background(), r, r.pc, r.pc.onError)
}

func (r *netRegion) Addr() uint64       { return uint64(r.addr) }
func (r *netRegion) Info() []byte       { return r.info }
func (r *netRegion) Mode() string       { return r.pc.net.Name() }
func (r *netRegion) mappedSize() uint64 { return r.size }

// netDrainWait bounds how long a sender's Close waits for its proxy to
// ship what the kernels posted (drain).
const netDrainWait = 5 * time.Second

// Close lets the proxy ship what the sending kernels posted (drain), takes
// the connection out of the proxy (which then no longer touches the
// staging), says goodbye, closes the network connections and frees the
// memory. The kernels that use it must be done. When the drain runs out of
// time, the error (wrapping context.DeadlineExceeded) names the peer and
// the steps left unsent; the rest of Close is done regardless.
func (r *netRegion) Close() error {
	var errs []error
	reason := ""
	if r.pc != nil && r.aborted != nil && r.aborted() {
		reason = r.pc.abortReason(nil)
	}
	if r.eng != nil {
		drained := r.drain()
		_ = r.pc.leave(r.eng) // its error was reported through onError
		if p := r.pc.failed.Load(); p != nil && reason == "" {
			reason = r.pc.abortReason(*p)
		}
		if !drained {
			err := r.pc.fail("closing: %d step(s) that the kernels posted to %s were not shipped after %v; the peer will not receive them: %w",
				r.pc.unsent(), r.pc.peer(), netDrainWait, context.DeadlineExceeded)
			errs = append(errs, err)
			if reason == "" {
				reason = r.pc.abortReason(err)
			}
		}
		r.eng.Release()
		r.eng = nil
	}
	if r.pc != nil {
		errs = append(errs, r.pc.close(reason))
		if r.pc.scratch != nil {
			errs = append(errs, syscall.Munmap(r.pc.scratch))
		}
		r.pc = nil
	}
	if r.alloc {
		errs = append(errs, r.mem.MemFreeHost(unsafe.Pointer(&r.host[0])))
		r.host, r.alloc = nil, false
	}
	return errors.Join(errs...)
}

// drain waits, on a sender, until the proxy has shipped every step the
// kernels posted and seen those sends complete: a sending kernel is done
// once its steps are in the staging (fewer than Steps need no credit), so
// its proxy may still hold the last ones when the communicator is
// destroyed, and the peer would take the goodbye that follows for the end
// of the data. It asks the proxy (drainAsk) and waits for a pass that
// began after the ask and ended with nothing posted left to ship (or
// found that the peer closed its side), at most netDrainWait; it reports
// false when the time ran out. It does not wait on a receiver, nor on a
// connection that is not up, failed, was killed or taken out of the proxy
// (tests), or whose communicator was aborted: Abort must stay fast.
func (r *netRegion) drain() bool {
	c := r.pc
	stop := func() bool { return c.failed.Load() != nil || r.aborted != nil && r.aborted() }
	if !c.sender || !c.up.Load() || c.killed || c.out || stop() {
		return true
	}
	ask := c.drainAsk.Add(1)
	for deadline := time.Now().Add(netDrainWait); c.drained.Load() < ask; {
		if stop() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// leave takes c out of engine e (Close; tests that take it out behind
// Close's back use it too, so that Close does not wait for a drain that
// no proxy serves).
func (c *netConn) leave(e *proxy.Engine) error {
	c.out = true
	return e.Remove(c)
}

// unsent counts the steps of which something that the kernels posted is
// not shipped: queued, in flight (its send not seen complete), or SIMPLE
// below tail and not yet queued. Only the proxy's goroutine, or anyone
// once the connection is out of the proxy, may call it.
func (c *netConn) unsent() int {
	steps := map[[2]uint64]bool{}
	for _, m := range append(c.queue[:len(c.queue):len(c.queue)], c.inflight...) {
		steps[[2]uint64{uint64(m.h.conn), m.h.step}] = true
	}
	for i := range c.nconn {
		tail := atomic.LoadUint64(c.word(uint64(i)*c.total + offTail))
		for s := max(c.simpleDone[i], c.head[i]); s < tail; s++ {
			if !c.llSeen[i][s] {
				steps[[2]uint64{uint64(i), s}] = true
			}
		}
	}
	return len(steps)
}

// peer is the peer's address, for messages.
func (c *netConn) peer() string {
	switch {
	case c.send != nil:
		return c.send.Peer()
	case c.recv != nil:
		return c.recv.Peer()
	}
	return "the peer"
}

// afterBye checks a sender whose receiver closed its side. A receiver
// closes once its kernels consumed every step they wanted, and credits
// them all before its goodbye (bye); so a step that this side's kernels
// posted and the receiver did not credit (shipped or not) was lost with
// it, and a kernel that waits for credits would wait for ever: that is an
// error naming the peer. LL lines that the kernels post after the goodbye
// are not looked for.
func (c *netConn) afterBye() error {
	if len(c.queue) == 0 {
		if _, err := c.pump(); err != nil {
			return c.peerErr("the receiver closed its side while a step was on its way: %w", err)
		}
	}
	if n := c.uncredited(); n > 0 {
		return c.peerErr("the receiver closed its side without consuming %d step(s) that this side's kernels posted", n)
	}
	return nil
}

// uncredited counts the steps that the kernels posted (SIMPLE: below
// tail; LL: lines seen, or, with size words, a word stored) and the
// receiver has not credited: after its goodbye, as the kernels go on.
func (c *netConn) uncredited() int {
	n := 0
	for i := range c.nconn {
		base := uint64(i) * c.total
		tail := max(atomic.LoadUint64(c.word(base+offTail)), c.head[i])
		n += int(tail - c.head[i])
		for s := tail; s < c.head[i]+generated.Steps; s++ {
			k := s % generated.Steps
			_, word := llSizeOf(atomic.LoadUint32(c.sizeWord(base, s)), s)
			if c.llSizes && word || c.llCursor[i][k] > 0 && c.llStep[i][k] == s {
				n++
			}
		}
	}
	return n
}

// ErrPeerAborted is wrapped by the error of a connection whose peer said
// goodbye because its communicator aborted (the error carries the peer's
// reason, which names its rank); the kernels that wait on the peer would
// wait for ever.
var ErrPeerAborted = errors.New("the peer aborted its communicator")

// llHoldLines is how many ready lines of an LL step whose size word says
// more are coming the sender holds back before it ships them as a piece:
// every message costs a socket write on both sides (microseconds over
// loopback), and the kernel writes a step's lines together, so a step of
// up to this many lines (32 KiB of lines, 16 KiB of payload) goes as one
// message; longer ones stream in pieces of at least this many.
const llHoldLines = 2048

// Message kinds of the proxy's protocol (in the header's kind byte).
const (
	kindSimple = 1          // a SIMPLE slot's bytes
	kindLL     = 2          // LL lines
	kindBye    = 3          // the sender closed its side: no more messages
	byeCredit  = ^uint32(0) // a credit's connection: the receiver closed its side
	byeWait    = 200 * time.Millisecond
	// byeFailWait bounds how long the proxy tries to post the goodbye of a
	// connection that failed, while the network takes no more messages.
	byeFailWait = 10 * time.Millisecond
	// byeReasonMax bounds the reason a goodbye carries (why its side
	// aborted; none: a clean close).
	byeReasonMax = 1024
	netMagic     = 0x544e474e // "NGNT"
	tagHandle    = 1
	tagHeader    = 2
	tagPayload   = 3
	tagCredit    = 4
)

// netConn is the proxy side of a netRegion.
type netConn struct {
	name     string
	log      *slog.Logger // NET/stats at close (Options.NetLog); nil: the process's NET logger
	net      ncclnet.Net
	dev      int
	sender   bool
	host     []byte // staging blocks
	scratch  []byte
	fifo     [3]uint64
	total    uint64
	nconn    int
	sizes    Sizes
	deadline time.Time // of the handshake
	onErr    func(error)
	rank     int          // this side's rank, for the goodbye's reason
	aborted  func() bool  // Options.Aborted (nil: never)
	cause    func() error // Options.AbortCause (nil: unknown)
	knobs    netKnobs

	listener ncclnet.Listener
	send     ncclnet.SendComm // data (sender) or credits (receiver)
	recv     ncclnet.RecvComm // credits (sender) or data (receiver)
	mhSend   []ncclnet.MemHandle
	mhRecv   []ncclnet.MemHandle
	ready    bool                  // handshake done (the proxy's goroutine)
	up       atomic.Bool           // ready, for other goroutines
	failed   atomic.Pointer[error] // the error the proxy reported

	// Sender.
	handleReq  ncclnet.Request
	handleSent bool
	queue      []netMsg // built, not yet posted
	inflight   []netMsg // posted, in order
	freeHdr    []int
	head       []uint64 // credited, per connection
	simpleDone []uint64 // steps below are shipped or known LL
	llDone     []uint64 // steps below are settled for the LL scan (llSizes)
	llSizes    bool     // the kernels publish LL size words (ConnStepSizes)
	llStep     [][generated.Steps]uint64
	llCursor   [][generated.Steps]int // lines shipped, per slot
	llHeld     [][generated.Steps]int // end of the lines seen ready from llCursor on and held back (llHoldLines)
	llSeen     []map[uint64]bool
	posted     []uint64 // steps below have some bytes queued, per connection
	creditReq  ncclnet.Request
	passes     uint64 // Progress calls since the handshake

	// Receiver.
	recvHdrReq   ncclnet.Request
	recvHdrDone  bool // recvHdr is checked, its payload not yet posted
	recvHdr      netHeader
	recvHdrAt    time.Time
	msgNext      int      // the message slot of the next header
	pays         []netPay // posted payloads, in order
	bounceNext   int      // the next LL bounce buffer
	credited     []uint64 // head sent back, per connection
	arrived      []uint64 // steps below had a header arrive, per connection
	creditsOut   []ncclnet.Request
	creditNext   int // ring index of the next credit slot
	handleRecvd  bool
	gone         bool // the peer said goodbye
	creditBroken bool // receiver: the credit connection failed
	killed       bool // tests: close as a killed process would, without goodbye
	byeSaid      bool // the goodbye is posted (or could not be)
	byeReq       ncclnet.Request
	quiet        bool // this side aborted and said so: the proxy leaves it be
	out          bool // out of the proxy (leave)

	// Close's drain (sender): Close adds to drainAsk, and the proxy
	// stores the value it read at a pass's start into drained when the
	// pass ends with nothing posted left to ship, or the peer closed.
	drainAsk, drained atomic.Uint64

	stats netStats
}

// netPay is a payload the receiver posted or received inline.
type netPay struct {
	h   netHeader
	dst []byte          // where it lands (the slot, a bounce buffer, or the message slot when inline)
	req ncclnet.Request // nil: it came inline, in dst
	at  time.Time       // its header's arrival
}

// netMsg is a step's data (or part of it) on its way: a header, then the
// payload.
type netMsg struct {
	h          netHeader
	payload    []byte
	slot       int // message slot in the scratch, -1 before posting
	hreq, preq ncclnet.Request
	posted     int // 0: nothing, 1: the header, 2: both (or inline)
	seen       time.Time
}

type netHeader struct {
	kind   byte
	conn   int
	step   uint64
	off, n uint64
	// sent is the low 32 bits of the sender's wall clock (ns) when its
	// proxy saw the step ready: the receiver's summary times the hop
	// with it, meaningful only between processes of one host.
	sent uint32
}

func (h netHeader) encode(b []byte) {
	clear(b[:hdrSize])
	binary.LittleEndian.PutUint32(b, netMagic)
	b[4] = h.kind
	binary.LittleEndian.PutUint32(b[8:], uint32(h.conn))
	binary.LittleEndian.PutUint64(b[12:], h.step)
	binary.LittleEndian.PutUint32(b[20:], uint32(h.off))
	binary.LittleEndian.PutUint32(b[24:], uint32(h.n))
	binary.LittleEndian.PutUint32(b[28:], h.sent)
}

func decodeHeader(b []byte) (netHeader, uint32) {
	return netHeader{kind: b[4], conn: int(binary.LittleEndian.Uint32(b[8:])), step: binary.LittleEndian.Uint64(b[12:]),
		off: uint64(binary.LittleEndian.Uint32(b[20:])), n: uint64(binary.LittleEndian.Uint32(b[24:])), sent: binary.LittleEndian.Uint32(b[28:])}, binary.LittleEndian.Uint32(b)
}

func (c *netConn) initState() {
	c.head = make([]uint64, c.nconn)
	c.simpleDone = make([]uint64, c.nconn)
	c.llDone = make([]uint64, c.nconn)
	c.llStep = make([][generated.Steps]uint64, c.nconn)
	c.llCursor = make([][generated.Steps]int, c.nconn)
	c.llHeld = make([][generated.Steps]int, c.nconn)
	c.llSeen = make([]map[uint64]bool, c.nconn)
	for i := range c.llSeen {
		c.llSeen[i] = map[uint64]bool{}
		for s := range generated.Steps {
			c.llStep[i][s] = uint64(s)
		}
	}
	c.credited = make([]uint64, c.nconn)
	c.arrived = make([]uint64, c.nconn)
	c.posted = make([]uint64, c.nconn)
	c.stats.start = time.Now()
	for i := range c.knobs.sendPairs {
		c.freeHdr = append(c.freeHdr, i)
	}
}

func (c *netConn) String() string { return "NET " + c.name }

func (c *netConn) onError(err error) {
	c.failed.Store(&err)
	if c.onErr != nil {
		c.onErr(err)
	}
}

func (c *netConn) fail(format string, a ...any) error {
	return fmt.Errorf("transport: %s: %w", c.name, fmt.Errorf(format, a...))
}

func (c *netConn) peerErr(format string, a ...any) error {
	peer := "?"
	if c.recv != nil {
		peer = c.recv.Peer()
	} else if c.send != nil {
		peer = c.send.Peer()
	}
	return fmt.Errorf("transport: %s: %w", c.name, &ncclnet.PeerError{Peer: peer, Op: "NET protocol", Err: fmt.Errorf(format, a...)})
}

// peerAborted is the error of a goodbye that carries the peer's reason.
func (c *netConn) peerAborted(reason []byte) error {
	return c.peerErr("%w: %s", ErrPeerAborted, printable(reason))
}

// printable is the peer's text with what would garble a log line (control
// characters, invalid UTF-8) replaced.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, string(b))
}

// abortReason is the goodbye's reason when this side aborted: its rank
// and its cause.
func (c *netConn) abortReason(cause error) string {
	if cause == nil && c.cause != nil {
		cause = c.cause()
	}
	if cause == nil {
		cause = errors.New("aborted by its caller")
	}
	return fmt.Sprintf("rank %d aborted: %v", c.rank, cause)
}

// bye tells the peer, best-effort and briefly, that this side closes,
// so that its proxy takes the end of the connection for what it is and not
// for a vanished peer: a clean close (reason "") or an abort, whose reason
// the peer's error carries. The connection is out of the proxy.
func (c *netConn) bye(reason string) {
	deadline := time.Now().Add(byeWait)
	c.postBye(reason, deadline)
	for c.byeReq != nil && time.Now().Before(deadline) {
		if done, _, err := c.byeReq.Test(); done || err != nil {
			c.byeReq = nil
			return
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// postBye posts the goodbye once (without waiting for it to go), trying
// until deadline while the network takes no more messages. A receiver's
// clean goodbye first credits every step its kernels consumed (credits
// wait while the proxy is busy): the sender takes a step left uncredited
// at the goodbye for one lost (afterBye).
func (c *netConn) postBye(reason string, deadline time.Time) {
	if !c.ready || c.gone || c.killed || c.send == nil || c.byeSaid {
		return
	}
	if len(reason) > byeReasonMax {
		reason = reason[:byeReasonMax-3] + "..."
	}
	if !c.sender && reason == "" {
		for !c.creditBroken && time.Now().Before(deadline) {
			busy, _ := c.sendCredits(false, true)
			if !busy && len(c.creditsOut) == 0 {
				break
			}
			if !busy {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
	if c.sender && len(c.queue) > 0 && c.queue[0].posted == 1 {
		// A header is out whose payload is not: the peer takes the next
		// message for that payload.
		for time.Now().Before(deadline) {
			r, err := c.send.Isend(c.queue[0].payload, tagPayload, c.mhSend[0])
			if err != nil {
				c.byeSaid = true
				return
			}
			if r != nil {
				c.queue[0].preq, c.queue[0].posted = r, 2
				break
			}
		}
	}
	b := c.scratch[scrBye : scrBye+hdrSize+byeReasonMax]
	tag := tagHeader
	if c.sender {
		netHeader{kind: kindBye, n: uint64(len(reason))}.encode(b)
		b = b[:hdrSize+copy(b[hdrSize:], reason)]
	} else {
		clear(b[:creditSize])
		binary.LittleEndian.PutUint32(b, byeCredit)
		binary.LittleEndian.PutUint32(b[4:], uint32(len(reason)))
		b = b[:creditSize+copy(b[creditSize:], reason)]
		tag = tagCredit
	}
	for {
		r, err := c.send.Isend(b, tag, c.mhSend[1])
		if err != nil || r != nil {
			c.byeSaid, c.byeReq = true, r
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
	}
}

func (c *netConn) close(reason string) error {
	if c.ready {
		l := c.log
		if l == nil {
			l = ncclnet.Logger()
		}
		if l.Enabled(context.Background(), slog.LevelInfo) {
			l.Info(c.stats.summary(c), config.SubsysNet.Attr())
		}
	}
	c.bye(reason)
	var errs []error
	for i, mh := range c.mhSend {
		if mh != nil {
			errs = append(errs, c.send.DeregMr(c.mhSend[i]))
		}
	}
	for i, mh := range c.mhRecv {
		if mh != nil {
			errs = append(errs, c.recv.DeregMr(c.mhRecv[i]))
		}
	}
	c.mhSend, c.mhRecv = nil, nil
	if c.send != nil {
		errs = append(errs, c.send.Close())
		c.send = nil
	}
	if c.recv != nil {
		errs = append(errs, c.recv.Close())
		c.recv = nil
	}
	if c.listener != nil {
		errs = append(errs, c.listener.Close())
		c.listener = nil
	}
	return errors.Join(errs...)
}

// word is the uint64 control word at byte off of the staging.
func (c *netConn) word(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&c.host[off])) }

func (c *netConn) slotBytes(p int) uint64 { return uint64(c.sizes[p]) / generated.Steps }

// slot is the FIFO slot of protocol p for step s on connection i.
func (c *netConn) slot(i, p int, s uint64) []byte {
	sb := c.slotBytes(p)
	off := uint64(i)*c.total + c.fifo[p] + (s%generated.Steps)*sb
	return c.host[off : off+sb]
}

func (c *netConn) register(reg func([]byte, ncclnet.PtrType) (ncclnet.MemHandle, error)) ([]ncclnet.MemHandle, error) {
	a, err := reg(c.host, ncclnet.PtrHost)
	if err != nil {
		return nil, c.fail("registering the staging memory: %w", err)
	}
	b, err := reg(c.scratch, ncclnet.PtrHost)
	if err != nil {
		return []ncclnet.MemHandle{a, nil}, c.fail("registering the scratch memory: %w", err)
	}
	return []ncclnet.MemHandle{a, b}, nil
}

// Progress implements proxy.Conn. Once the caller aborted (its kernels
// stop), the connection says goodbye with the cause and is left alone; a
// connection that fails says goodbye with its error: either way the peer,
// whose kernels may wait on this side, fails at once with an error naming
// this rank and why (ErrPeerAborted), rather than waiting for ever.
func (c *netConn) Progress() (bool, error) {
	if c.quiet {
		if c.byeReq != nil {
			if done, _, err := c.byeReq.Test(); done || err != nil {
				c.byeReq = nil
			}
		}
		if !c.byeSaid {
			c.postBye(c.abortReason(nil), time.Time{})
		}
		return false, nil
	}
	if c.ready && c.aborted != nil && c.aborted() {
		c.quiet = true
		c.postBye(c.abortReason(nil), time.Time{})
		return true, nil
	}
	ask := c.drainAsk.Load()
	busy, err := c.progress()
	if ask != 0 && err == nil && c.ready && (c.gone || len(c.queue) == 0 && len(c.inflight) == 0) {
		c.drained.Store(ask)
	}
	if err != nil {
		c.postBye(c.abortReason(err), time.Now().Add(byeFailWait))
	}
	return busy, err
}

func (c *netConn) progress() (bool, error) {
	if !c.ready {
		busy, err := c.handshake()
		if err == nil && !c.ready && time.Now().After(c.deadline) {
			err = c.fail("the peer did not complete the connection before the setup deadline (it exited, or is stuck)")
		}
		return busy, err
	}
	if c.gone {
		if c.sender {
			return false, c.afterBye()
		}
		if len(c.pays) > 0 {
			// The goodbye came on the headers; the payloads posted before
			// it still land (the sender saw their sends complete).
			return c.progressRecv()
		}
		return false, nil
	}
	if c.sender {
		return c.progressSend()
	}
	return c.progressRecv()
}

// handshake: the receiver accepts the data connection, reads the sender's
// credit handle and connects back; the sender sends that handle and
// accepts the credit connection.
func (c *netConn) handshake() (bool, error) {
	var err error
	if c.sender {
		if c.mhSend == nil {
			if c.mhSend, err = c.register(c.send.RegMr); err != nil {
				return false, err
			}
		}
		if c.handleReq == nil {
			if c.handleReq, err = c.send.Isend(c.scratch[scrHandle:scrHandle+ncclnet.HandleSize], tagHandle, c.mhSend[1]); err != nil || c.handleReq == nil {
				return false, c.wrap(err)
			}
		}
		if !c.handleSent {
			done, _, err := c.handleReq.Test()
			if err != nil || !done {
				return false, c.wrap(err)
			}
			c.handleSent = true
		}
		if c.recv, err = c.net.Accept(c.listener); err != nil || c.recv == nil {
			return false, c.wrap(err)
		}
		if c.mhRecv, err = c.register(c.recv.RegMr); err != nil {
			return false, err
		}
		c.ready = true
		c.up.Store(true)
		return true, nil
	}
	if c.recv == nil {
		if c.recv, err = c.net.Accept(c.listener); err != nil || c.recv == nil {
			return false, c.wrap(err)
		}
		if c.mhRecv, err = c.register(c.recv.RegMr); err != nil {
			return false, err
		}
	}
	if !c.handleRecvd {
		if c.recvHdrReq == nil {
			if c.recvHdrReq, err = c.recv.Irecv(c.scratch[scrHandle:scrHandle+ncclnet.HandleSize], tagHandle, c.mhRecv[1]); err != nil || c.recvHdrReq == nil {
				return false, c.wrap(err)
			}
		}
		done, n, err := c.recvHdrReq.Test()
		if err != nil || !done {
			return false, c.wrap(err)
		}
		if n != ncclnet.HandleSize {
			return false, c.peerErr("a %d-byte credit handle, want %d", n, ncclnet.HandleSize)
		}
		c.recvHdrReq, c.handleRecvd = nil, true
	}
	var h ncclnet.Handle
	copy(h[:], c.scratch[scrHandle:])
	if c.send, err = c.net.Connect(c.dev, h); err != nil || c.send == nil {
		return false, c.wrap(err)
	}
	if c.mhSend, err = c.register(c.send.RegMr); err != nil {
		return false, err
	}
	c.ready = true
	c.up.Store(true)
	return true, nil
}

// waitReady waits until the proxy has completed the connection's
// handshake, so that a peer that closes right after setup (a Destroy right
// after init) says goodbye on a connection that exists.
func (r *netRegion) waitReady(ctx context.Context) error {
	for !r.pc.up.Load() {
		if p := r.pc.failed.Load(); p != nil {
			return *p
		}
		if time.Now().After(r.pc.deadline) {
			return r.pc.fail("the peer did not complete the connection before the setup deadline")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("transport: %s: %w", r.pc.name, context.Cause(ctx))
		case <-time.After(100 * time.Microsecond):
		}
	}
	return nil
}

func (c *netConn) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("transport: %s: %w", c.name, err)
}

// llFlag is the flag of LL lines of step s (devicesrc/ng_prims.h).
func llFlag(s uint64) uint32 { return uint32(s%0xFFFFFFFF) + 1 }

// llReady reports whether the LL line at b (16 bytes) carries flag f in
// both halves; each half is loaded whole.
func llReady(b []byte, f uint32) bool {
	lo := atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[0])))
	hi := atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[8])))
	return uint32(lo>>32) == f && uint32(hi>>32) == f
}

// creditDue reports whether the sender should read its credits this
// pass: a connection is within creditNear free slots of stalling, or it
// is a creditPoll'th pass.
func (c *netConn) creditDue() bool {
	if c.passes%creditPoll == 0 {
		return true
	}
	for i, p := range c.posted {
		// llDone: LL steps of no lines were posted, with nothing shipped.
		if max(p, c.llDone[i])+creditNear >= c.head[i]+generated.Steps {
			return true
		}
	}
	return false
}

func (c *netConn) progressSend() (bool, error) {
	busy := false
	c.passes++
	// Credits, when one may matter.
	for c.creditDue() {
		if c.creditReq == nil {
			r, err := c.recv.Irecv(c.scratch[scrCredits:scrCredOut], tagCredit, c.mhRecv[1])
			if err != nil {
				return busy, c.wrap(err)
			}
			if r == nil {
				break
			}
			c.creditReq = r
		}
		done, n, err := c.creditReq.Test()
		if err != nil {
			return busy, c.wrap(err)
		}
		if !done {
			break
		}
		c.creditReq = nil
		if err := c.credit(n); err != nil {
			return busy, err
		}
		if c.gone {
			return true, nil
		}
		busy = true
	}
	// New steps. Steps below simpleDone are settled (SIMPLE ones shipped;
	// LL ones had every line visible when tail passed them, and the pass
	// that moved simpleDone shipped them), so LL lines are looked for from
	// there only: a connection streaming SIMPLE costs no LL scan of its
	// busy slots.
	//
	// With LL size words (llSizes) a step is complete once its word is
	// visible and that many lines are shipped, and llDone moves past it:
	// the scan starts at the first step not complete and stops at the
	// first LL step not complete or not started, as the kernel writes a
	// step's word (fenced) before its lines and a step's lines only after
	// the previous step's. It passes SIMPLE steps below tail (an LL step
	// below tail had its word and lines visible before tail: it completes
	// in this pass, before the SIMPLE loop moves simpleDone past it). A
	// 0-line step completes on its word alone. Without words every slot in the credit window is
	// looked at until credits pass it.
	var now time.Time
	llSlot := c.slotBytes(0)
	for i := range c.nconn {
		base := uint64(i) * c.total
		tail := atomic.LoadUint64(c.word(base + offTail))
		head := c.head[i]
		ll := c.host[base+c.fifo[0] : base+c.fifo[0]+generated.Steps*llSlot]
		for s := max(head, c.simpleDone[i], c.llDone[i]); s < head+generated.Steps; s++ {
			k := s % generated.Steps
			if c.llStep[i][k] != s {
				c.llStep[i][k], c.llCursor[i][k], c.llHeld[i][k] = s, 0, 0
			}
			c.stats.llLooks++
			lines, known := int(llSlot/16), false
			if c.llSizes {
				if lines, known = llSizeOf(atomic.LoadUint32(c.sizeWord(base, s)), s); !known {
					if s < tail {
						continue // a SIMPLE step: shipped below
					}
					break // not started
				}
				if lines > int(llSlot/16) {
					return busy, c.fail("the kernel posted LL step %d on connection %d with %d lines, more than its %d-line slot", s, i, lines, llSlot/16)
				}
			}
			// Most looks find nothing: one load of the first line not
			// yet shipped says so (its low half's flag).
			if cur := c.llCursor[i][k]; cur >= lines || uint32(atomic.LoadUint64((*uint64)(unsafe.Pointer(&ll[k*llSlot+uint64(cur)*16])))>>32) != llFlag(s) {
				if known && cur >= lines {
					c.llDone[i] = s + 1
					continue
				}
				if known {
					break // its lines are on their way
				}
				continue
			}
			slot := c.slot(i, 0, s)[:lines*16]
			f := llFlag(s)
			cur := c.llCursor[i][k]
			end := max(cur, c.llHeld[i][k])
			for end*16 < len(slot) && llReady(slot[end*16:], f) {
				end++
			}
			if known && end < lines && end-cur < llHoldLines {
				// The rest of a step of known size is on its way: hold
				// what is ready rather than pay a message for a piece
				// (the kernel writes a step's lines all at once).
				c.llHeld[i][k] = end
				break
			}
			c.llHeld[i][k] = 0
			if end > cur {
				if now.IsZero() {
					now = time.Now()
				}
				c.queue = append(c.queue, netMsg{slot: -1, payload: slot[cur*16 : end*16], seen: now,
					h: netHeader{kind: kindLL, conn: i, step: s, off: uint64(cur * 16), n: uint64((end - cur) * 16), sent: uint32(now.UnixNano())}})
				c.llCursor[i][k] = end
				c.posted[i] = max(c.posted[i], s+1)
				if s >= c.simpleDone[i] {
					c.llSeen[i][s] = true
				}
				busy = true
			}
			if known {
				if end < lines {
					break
				}
				c.llDone[i] = s + 1
			}
		}
		done := tail
		for s := c.simpleDone[i]; s < tail; s++ {
			if s < c.head[i] {
				delete(c.llSeen[i], s)
				continue
			}
			w := atomic.LoadUint32(c.sizeWord(base, s))
			if _, ll := llSizeOf(w, s); ll {
				if c.llSizes && s >= c.llDone[i] {
					done = s // lines still to ship: the LL scan's, from here
					break
				}
				delete(c.llSeen[i], s)
				continue // an LL step of no lines or all shipped
			}
			if c.llSeen[i][s] {
				delete(c.llSeen[i], s)
				continue
			}
			sb := c.slot(i, 2, s)
			n := uint64(w)
			if n > uint64(len(sb)) {
				return busy, c.fail("the kernel posted SIMPLE step %d on connection %d with %d bytes, more than its %d-byte slot", s, i, n, len(sb))
			}
			if now.IsZero() {
				now = time.Now()
			}
			c.queue = append(c.queue, netMsg{slot: -1, payload: sb[:n], seen: now, h: netHeader{kind: kindSimple, conn: i, step: s, n: n, sent: uint32(now.UnixNano())}})
			busy = true
		}
		if done > c.simpleDone[i] {
			c.simpleDone[i] = done
			c.posted[i] = max(c.posted[i], done)
		}
	}
	b, err := c.pump()
	return busy || b, err
}

// sizeWord is step s's size word in the staging block at base.
func (c *netConn) sizeWord(base, s uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&c.host[base+offStepSizes+4*(s%generated.Steps)]))
}

// msg is message slot k of the scratch.
func (c *netConn) msg(k int) []byte {
	return c.scratch[scrHeaders+k*msgSlot : scrHeaders+(k+1)*msgSlot]
}

// pump posts the queued messages in order (as message slots and the
// network allow) and retires the completed ones.
func (c *netConn) pump() (bool, error) {
	busy := false
	for len(c.queue) > 0 {
		m := &c.queue[0]
		if m.posted == 0 {
			inline := len(m.payload) <= inlineStep
			if m.slot < 0 {
				if len(c.freeHdr) == 0 {
					break
				}
				m.slot = c.freeHdr[len(c.freeHdr)-1]
				c.freeHdr = c.freeHdr[:len(c.freeHdr)-1]
				b := c.msg(m.slot)
				m.h.encode(b)
				if inline {
					// The lines and bytes stay put until the receiver
					// credits the step, which it cannot before this goes.
					copy(b[hdrSize:], m.payload)
				}
			}
			n := hdrSize
			if inline {
				n += len(m.payload)
			}
			r, err := c.send.Isend(c.msg(m.slot)[:n], tagHeader, c.mhSend[1])
			if err != nil || r == nil {
				return busy, c.wrap(err)
			}
			m.hreq, m.posted = r, 1
			if inline {
				m.posted = 2
				c.inflight = append(c.inflight, *m)
				c.queue = c.queue[1:]
				busy = true
				continue
			}
		}
		r, err := c.send.Isend(m.payload, tagPayload, c.mhSend[0])
		if err != nil || r == nil {
			return busy, c.wrap(err)
		}
		m.preq, m.posted = r, 2
		c.inflight = append(c.inflight, *m)
		c.queue = c.queue[1:]
		busy = true
	}
	for len(c.inflight) > 0 {
		m := &c.inflight[0]
		for _, r := range []*ncclnet.Request{&m.hreq, &m.preq} {
			if *r == nil {
				continue
			}
			done, _, err := (*r).Test()
			if err != nil {
				return busy, c.wrap(err)
			}
			if done {
				*r = nil
			}
		}
		if m.hreq != nil || m.preq != nil {
			break
		}
		c.stats.sent(m.h.kind, m.h.n, time.Since(m.seen))
		c.freeHdr = append(c.freeHdr, m.slot)
		c.inflight = c.inflight[1:]
		busy = true
	}
	return busy, nil
}

func (c *netConn) progressRecv() (bool, error) {
	busy := false
	for {
		moved := false
		// Payloads that arrived, in order (a SIMPLE step's tail must not
		// pass an earlier step's bytes still in flight).
		for len(c.pays) > 0 {
			p := c.pays[0]
			n := int(p.h.n)
			if p.req != nil {
				done, got, err := p.req.Test()
				if err != nil {
					return busy, c.wrap(err)
				}
				if !done {
					break
				}
				n = got
			}
			c.pays[0] = netPay{}
			c.pays = c.pays[1:]
			moved = true
			h := p.h
			if uint64(n) != h.n {
				return true, c.peerErr("step %d on connection %d: %d bytes where the header announced %d", h.step, h.conn, n, h.n)
			}
			if h.kind == kindSimple {
				if p.req == nil {
					copy(c.slot(h.conn, 2, h.step)[h.off:h.off+h.n], p.dst)
				}
				tail := c.word(uint64(h.conn)*c.total + offTail)
				if atomic.LoadUint64(tail) < h.step+1 {
					atomic.StoreUint64(tail, h.step+1)
				}
			} else {
				// LL lines land 8 bytes at a time, each half with its flag.
				dst := c.slot(h.conn, 0, h.step)[h.off : h.off+h.n]
				for o := 0; o < len(dst); o += 8 {
					atomic.StoreUint64((*uint64)(unsafe.Pointer(&dst[o])), binary.LittleEndian.Uint64(p.dst[o:]))
				}
			}
			c.stats.stored(h, p.at)
		}
		// The next header (with its payload when inline), while payloads
		// may still be in flight.
		if !c.gone && !c.recvHdrDone && len(c.pays) < c.knobs.recvAhead {
			// Message slots go round in order and are freed in order: with
			// fewer than recvAhead payloads pending, this one is free.
			b := c.msg(c.msgNext)
			if c.recvHdrReq == nil {
				r, err := c.recv.Irecv(b, tagHeader, c.mhRecv[1])
				if err != nil {
					return busy, c.wrap(err)
				}
				c.recvHdrReq = r
			}
			if c.recvHdrReq != nil {
				done, n, err := c.recvHdrReq.Test()
				if err != nil {
					return busy, c.wrap(err)
				}
				if done {
					c.recvHdrReq = nil
					inline, err := c.checkHeader(b, n)
					if err != nil {
						return true, err
					}
					if c.gone {
						return true, nil
					}
					c.msgNext = (c.msgNext + 1) % c.knobs.recvAhead
					if inline {
						c.pays = append(c.pays, netPay{h: c.recvHdr, dst: b[hdrSize : hdrSize+c.recvHdr.n], at: c.stats.now()})
					} else {
						c.recvHdrDone, c.recvHdrAt = true, c.stats.now()
					}
					busy = true
					continue
				}
			}
		}
		// A payload that travels apart.
		if c.recvHdrDone && len(c.pays) < c.knobs.recvAhead {
			h := c.recvHdr
			p := netPay{h: h, at: c.recvHdrAt}
			mh := c.mhRecv[0]
			if h.kind == kindSimple {
				p.dst = c.slot(h.conn, 2, h.step)[h.off : h.off+h.n]
			} else {
				mh = c.mhRecv[1]
				llSlot := c.slotBytes(0)
				off := scrBounce + uint64(c.bounceNext)*llSlot
				p.dst = c.scratch[off : off+h.n]
			}
			r, err := c.recv.Irecv(p.dst, tagPayload, mh)
			if err != nil {
				return busy, c.wrap(err)
			}
			if r != nil {
				p.req = r
				if h.kind == kindLL {
					c.bounceNext = (c.bounceNext + 1) % c.knobs.recvAhead
				}
				c.pays = append(c.pays, p)
				c.recvHdrDone, moved = false, true
			}
		}
		if !moved {
			return c.sendCredits(busy, false)
		}
		busy = true
	}
}

// checkHeader validates message slot b's n bytes just received, and says
// whether the step's payload came with it (inline) or follows apart.
func (c *netConn) checkHeader(b []byte, n int) (inline bool, err error) {
	h, magic := decodeHeader(b)
	if n < hdrSize || magic != netMagic {
		return false, c.peerErr("a %d-byte message header with magic %#x: want at least %d bytes and %#x (garbage from the peer)", n, magic, hdrSize, netMagic)
	}
	if h.kind == kindBye {
		if h.n > byeReasonMax || uint64(n-hdrSize) != h.n {
			return false, c.peerErr("a goodbye of %d bytes announcing a %d-byte reason (at most %d)", n-hdrSize, h.n, byeReasonMax)
		}
		c.gone = true
		if h.n > 0 {
			return false, c.peerAborted(b[hdrSize:n])
		}
		return false, nil
	}
	if h.kind != kindSimple && h.kind != kindLL {
		return false, c.peerErr("message kind %d: want %d (SIMPLE) or %d (LL)", h.kind, kindSimple, kindLL)
	}
	if h.conn < 0 || h.conn >= c.nconn {
		return false, c.peerErr("connection %d of %d", h.conn, c.nconn)
	}
	head := atomic.LoadUint64(c.word(uint64(h.conn)*c.total + offHead))
	if h.step < head || h.step >= head+generated.Steps {
		return false, c.peerErr("step %d on connection %d whose receiver consumed %d steps (want %d..%d)", h.step, h.conn, head, head, head+generated.Steps-1)
	}
	p, align := 2, uint64(1)
	if h.kind == kindLL {
		p, align = 0, 16
	}
	sb := c.slotBytes(p)
	if (h.n == 0 && h.kind == kindLL) || h.off%align != 0 || h.n%align != 0 || h.off > sb || h.n > sb-h.off {
		return false, c.peerErr("%d bytes at offset %d of a %d-byte slot (step %d, connection %d)", h.n, h.off, sb, h.step, h.conn)
	}
	inline = h.n <= inlineStep
	switch {
	case inline && uint64(n-hdrSize) != h.n:
		return false, c.peerErr("step %d on connection %d: %d bytes where the header announced %d", h.step, h.conn, n-hdrSize, h.n)
	case !inline && n != hdrSize:
		return false, c.peerErr("step %d on connection %d: %d bytes behind a header announcing %d to follow apart (steps of more than %d bytes do)", h.step, h.conn, n-hdrSize, h.n, inlineStep)
	}
	c.recvHdr = h
	c.arrived[h.conn] = max(c.arrived[h.conn], h.step+1)
	return inline, nil
}

// sendCredits returns the receiving kernels' heads to the sender, of the
// connections whose credit is due (creditBatch, creditNear), or, with all
// (the goodbye), of every connection with a step consumed since its last
// credit. A failure here
// is not reported: the sender closed (its goodbye follows on the data
// connection) or died (the data connection fails too, and that is
// reported).
func (c *netConn) sendCredits(busy, all bool) (bool, error) {
	if c.creditBroken {
		return busy, nil
	}
	for len(c.creditsOut) > 0 {
		done, _, err := c.creditsOut[0].Test()
		if err != nil {
			c.creditBroken = true
			return busy, nil
		}
		if !done {
			break
		}
		c.creditsOut = c.creditsOut[1:]
		c.creditNext = (c.creditNext + 1) % maxCredits
	}
	for i := range c.nconn {
		if len(c.creditsOut) == maxCredits {
			break
		}
		// An LL receiver does not wait for a step of no lines, so its
		// head may run ahead of the sender's credits by any number of
		// such steps; a credit moves the sender's head by at most a
		// FIFO's depth (its check against garbage), the rest follows.
		h := min(atomic.LoadUint64(c.word(uint64(i)*c.total+offHead)), c.credited[i]+generated.Steps)
		near := c.arrived[i]+creditNear >= c.credited[i]+generated.Steps
		if h == c.credited[i] || !all && h < c.credited[i]+c.knobs.creditBatch && !near {
			continue
		}
		k := (c.creditNext + len(c.creditsOut)) % maxCredits
		b := c.scratch[scrCredOut+k*creditSize : scrCredOut+(k+1)*creditSize]
		binary.LittleEndian.PutUint32(b, uint32(i))
		binary.LittleEndian.PutUint32(b[4:], 0)
		binary.LittleEndian.PutUint64(b[8:], h)
		r, err := c.send.Isend(b, tagCredit, c.mhSend[1])
		if err != nil {
			c.creditBroken = true
			return busy, nil
		}
		if r == nil {
			return busy, nil
		}
		c.creditsOut = append(c.creditsOut, r)
		c.credited[i], busy = h, true
		c.stats.credits++
	}
	return busy, nil
}

// credit applies a credit message of n bytes, or the receiver's goodbye
// (with the reason it aborted, if it did).
func (c *netConn) credit(n int) error {
	b := c.scratch[scrCredits:scrCredOut]
	if n < creditSize {
		return c.peerErr("a %d-byte credit, want %d", n, creditSize)
	}
	conn, head := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint64(b[8:])
	if conn == byeCredit {
		if k := binary.LittleEndian.Uint32(b[4:]); uint64(k) != uint64(n-creditSize) {
			return c.peerErr("a goodbye of %d bytes announcing a %d-byte reason", n, k)
		}
		c.gone = true
		if n > creditSize {
			return c.peerAborted(b[creditSize:n])
		}
		return nil
	}
	switch {
	case n != creditSize:
		return c.peerErr("a %d-byte credit, want %d", n, creditSize)
	case int(conn) >= c.nconn:
		return c.peerErr("a credit for connection %d of %d", conn, c.nconn)
	case head < c.head[conn] || head > c.head[conn]+generated.Steps:
		return c.peerErr("a credit to step %d on connection %d whose head is %d (credits grow by at most %d)", head, conn, c.head[conn], generated.Steps)
	}
	c.head[conn] = head
	atomic.StoreUint64(c.word(uint64(conn)*c.total+offHead), head)
	return nil
}

// netStats is what a proxy connection did, summarized at close in one
// NET log line (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET): steps and bytes
// by protocol, and times as log-scale histograms. The sender times each
// step from the pass that saw it ready to the pass that saw its send
// complete; the receiver from its header's arrival to its store, and
// from the sender's "seen ready" (the header's clock) to its store: the
// hop, which only means something between processes of one host.
type netStats struct {
	start        time.Time
	msgs, bytes  [3]uint64 // by kind (kindSimple, kindLL)
	credits      uint64
	llLooks      uint64 // sender: steps the LL scan looked at, over passes
	sendT, recvT histogram
	hopT         histogram
	hopBad       uint64 // hops beyond the clock's 32-bit range, or negative
}

func (s *netStats) now() time.Time { return time.Now() }

func (s *netStats) sent(kind byte, n uint64, d time.Duration) {
	s.msgs[kind%3]++
	s.bytes[kind%3] += n
	s.sendT.add(d)
}

func (s *netStats) stored(h netHeader, at time.Time) {
	now := time.Now()
	s.msgs[h.kind%3]++
	s.bytes[h.kind%3] += h.n
	s.recvT.add(now.Sub(at))
	if hop := int32(uint32(now.UnixNano()) - h.sent); hop >= 0 {
		s.hopT.add(time.Duration(hop))
	} else {
		s.hopBad++
	}
}

// summary is the log line's text.
func (s *netStats) summary(c *netConn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NET/stats %s over %s: SIMPLE %d steps %d B, LL %d steps %d B", c.name, time.Since(s.start).Round(time.Millisecond),
		s.msgs[kindSimple], s.bytes[kindSimple], s.msgs[kindLL], s.bytes[kindLL])
	if c.sender {
		fmt.Fprintf(&b, "; ready->sent %s; LL scan %d looks in %d passes", s.sendT.String(), s.llLooks, c.passes)
	} else {
		fmt.Fprintf(&b, "; arrived->stored %s; hop (sender saw ready->stored, one host's clock) %s", s.recvT.String(), s.hopT.String())
		if s.hopBad > 0 {
			fmt.Fprintf(&b, " (%d out of range)", s.hopBad)
		}
		fmt.Fprintf(&b, "; credits sent %d", s.credits)
	}
	for _, x := range []struct {
		side string
		c    any
	}{{"data", map[bool]any{true: c.send, false: c.recv}[c.sender]}, {"credits", map[bool]any{true: c.recv, false: c.send}[c.sender]}} {
		if st, ok := x.c.(interface{ Stats() ncclnet.SocketStats }); ok {
			v := st.Stats()
			fmt.Fprintf(&b, "; %s socket writes %d reads %d (%d empty)", x.side, v.Writes, v.Reads, v.EmptyReads)
			if v.DataWrites+v.DataReads > 0 {
				fmt.Fprintf(&b, ", its data sockets writes %d reads %d (%d empty)", v.DataWrites, v.DataReads, v.DataEmptyReads)
			}
		}
	}
	return b.String()
}

// histogram counts durations in buckets of a quarter of a power of two
// (ns), enough for medians and tails.
type histogram struct {
	n      uint64
	bucket [256]uint64
}

func (h *histogram) add(d time.Duration) {
	v := uint64(max(d, 0))
	k := 0
	if v >= 4 {
		e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
		k = e*4 + int(v>>(e-2)&3)
	} else {
		k = int(v)
	}
	h.bucket[min(k, len(h.bucket)-1)]++
	h.n++
}

// quantile is the lower bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	want := uint64(q*float64(h.n-1)) + 1
	var sum uint64
	for k, c := range h.bucket {
		if sum += c; sum >= want {
			if k < 4 {
				return time.Duration(k)
			}
			e := k / 4
			return time.Duration(uint64(4+k%4) << (e - 2))
		}
	}
	return 0
}

func (h *histogram) String() string {
	if h.n == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d p50 %v p99 %v max %v", h.n, h.quantile(0.5), h.quantile(0.99), h.quantile(1))
}
