package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	ncclnet "github.com/ncclgo/ncclgo/runtime/net"
	"github.com/ncclgo/ncclgo/runtime/net/nettest"
	"github.com/ncclgo/ncclgo/runtime/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostMem is a rank's memory on the CPU: registered host memory's "device
// address" is its host address, so that a Go "kernel" can use the
// ConnInfo that Connect builds (address lookups go through the registered
// ranges, never through uintptr conversions).
type hostMem struct {
	*fakeMem
	mu   sync.Mutex
	regs map[uint64][]byte
	// allocs counts MemAllocHost calls; onFree, when set, is called
	// (under mu) as MemFreeHost frees p.
	allocs int
	onFree func(p unsafe.Pointer)
}

func newHostMem() *hostMem { return &hostMem{fakeMem: newFakeMem(), regs: map[uint64][]byte{}} }

func (m *hostMem) MemHostRegister(p unsafe.Pointer, n uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.regs[uint64(uintptr(p))] = unsafe.Slice((*byte)(p), n)
	return nil
}

func (m *hostMem) MemHostUnregister(p unsafe.Pointer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regs[uint64(uintptr(p))]; !ok {
		return fmt.Errorf("unregistering %p, never registered", p)
	}
	delete(m.regs, uint64(uintptr(p)))
	return nil
}

// MemAllocHost maps n bytes of its own, filled with garbage as
// cuMemHostAlloc's may be.
func (m *hostMem) MemAllocHost(n uint64) (unsafe.Pointer, error) {
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	for i := range b {
		b[i] = 0xA5
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.regs[uint64(uintptr(unsafe.Pointer(&b[0])))] = b
	m.allocs++
	return unsafe.Pointer(&b[0]), nil
}

// MemFreeHost unmaps memory from MemAllocHost: whoever touches it after
// (a proxy still driving the connection) faults the test process, as a
// kernel would fault the GPU.
func (m *hostMem) MemFreeHost(p unsafe.Pointer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.regs[uint64(uintptr(p))]
	if !ok {
		return fmt.Errorf("MemFreeHost(%p): not from MemAllocHost", p)
	}
	delete(m.regs, uint64(uintptr(p)))
	if m.onFree != nil {
		m.onFree(p)
	}
	return syscall.Munmap(b)
}

func (m *hostMem) HostDevicePointer(p unsafe.Pointer) (cuda.DevicePtr, error) {
	return cuda.DevicePtr(uintptr(p)), nil
}

// at returns n bytes at device address a.
func (m *hostMem) at(a, n uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	for base, b := range m.regs {
		if a >= base && a+n <= base+uint64(len(b)) {
			return b[a-base : a-base+n]
		}
	}
	panic(fmt.Sprintf("address %#x+%d is not registered host memory", a, n))
}

func (m *hostMem) word(a uint64) *uint64 { return (*uint64)(unsafe.Pointer(&m.at(a, 8)[0])) }

var netSizes = Sizes{8 << 10, 16 << 10, 64 << 10}

// netTestKnobs, when set, are the NET settings connectNET uses instead of
// the environment's (tests that set it restore it).
var netTestKnobs *netKnobs

// loNet is the socket backend over loopback with threads × socks data
// sockets, and the environment's other socket settings (splicing, the
// chunk size).
func loNet(t testing.TB, threads, socks int) ncclnet.Net {
	o, err := ncclnet.SocketOptionsFromEnv(os.Getenv)
	require.NoError(t, err)
	o.Interface, o.Family, o.NThreads, o.NSocksPerThread = "lo", "AF_INET", threads, socks
	n, err := ncclnet.NewSocket(o)
	require.NoError(t, err)
	return n
}

// connectNET connects n ranks, each on its own host, through NET over n.
func connectNET(t testing.TB, nt ncclnet.Net, n, nch int, onErr func(r int, err error)) ([]*Set, []*hostMem) {
	t.Helper()
	return connectNETSizes(t, nt, n, nch, netSizes, onErr)
}

// connectNETSizes is connectNET with buffers of the given sizes.
func connectNETSizes(t testing.TB, nt ncclnet.Net, n, nch int, sizes Sizes, onErr func(r int, err error)) ([]*Set, []*hostMem) {
	t.Helper()
	return connectNETOpts(t, nt, n, nch, sizes, func(r int) Options {
		return Options{ProxyError: func(err error) { onErr(r, err) }}
	})
}

// connectNETOpts is connectNETSizes with each rank's Options (its
// Transports are set here).
func connectNETOpts(t testing.TB, nt ncclnet.Net, n, nch int, sizes Sizes, options func(r int) Options) ([]*Set, []*hostMem) {
	t.Helper()
	peers := make([]Peer, n)
	mems := make([]*hostMem, n)
	for r := range n {
		peers[r] = Peer{PID: 1, Host: fmt.Sprintf("host%d", r)}
		mems[r] = newHostMem()
	}
	nets := bootstrap.NewInProcess(n)
	sets := make([]*Set, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			opts := options(r)
			opts.Transports = []Transport{P2P{}, SHM{}, NET{Net: nt, SetupTimeout: 10 * time.Second, knobs: netTestKnobs}}
			sets[r], errs[r] = Connect(context.Background(), nets[r], mems[r], r, peers, ringEdges(n, nch, r), sizes, opts)
		})
	}
	wg.Wait()
	for _, nt := range nets {
		nt.Close()
	}
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		assert.True(t, sets[r].Uses("NET"))
	}
	return sets, mems
}

// The fake kernels' traffic: per step, its protocol and byte count.
func stepPlan(ch int, s uint64) (proto int, n int) {
	switch (s/5%3 + uint64(ch)) % 3 { // runs of 5 steps, protocols mixed
	case 0:
		return 2, int(netSizes[2]/generated.Steps) - int(s%7)*512 // SIMPLE, sometimes partial
	case 1:
		return 0, int(1 + (s*13)%64) // LL lines
	}
	return 2, 8
}

func stepByte(ch int, s uint64, i int) byte { return byte(int(s)*7 + i*13 + ch*101) }

// deadline bounds the fake kernels' waits.
func spin(t testing.TB, what string, cond func() bool) bool {
	for d := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(d) {
			t.Errorf("%s: waited 20 s", what)
			return false
		}
		runtime.Gosched() // the CPU is shared with the proxy
	}
	return true
}

// sendKernel writes steps as the device code does (ng_prims.h).
func sendKernel(t *testing.T, m *hostMem, ci generated.ConnInfo, ch int, steps uint64, stop *atomic.Bool) {
	head, tail := m.word(ci.Head), m.word(ci.Tail)
	for s := uint64(0); s < steps && !stop.Load(); s++ {
		if !spin(t, fmt.Sprintf("ch%d send step %d: head", ch, s), func() bool { return stop.Load() || atomic.LoadUint64(head)+generated.Steps > s }) {
			return
		}
		proto, n := stepPlan(ch, s)
		slot := uint64(ci.BuffSizes[proto]) / generated.Steps
		buf := m.at(ci.Buffs[proto]+(s%generated.Steps)*slot, slot)
		if proto == 2 {
			for i := range n {
				buf[i] = stepByte(ch, s, i)
			}
			// Past the step's bytes: what must not travel.
			for i := n; i < len(buf); i++ {
				buf[i] = 0xEE
			}
			postSize(m, ci, s, n)
			atomic.StoreUint64(tail, s+1)
			continue
		}
		postLLSize(m, ci, s, n)
		f := uint64(llFlag(s))
		for l := range n {
			lo := uint64(stepByte(ch, s, 2*l)) | f<<32
			hi := uint64(stepByte(ch, s, 2*l+1)) | f<<32
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), hi)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), lo)
		}
	}
}

// postSize stores SIMPLE step s's byte count where the device code does
// on connections flagged ConnStepSizes.
func postSize(m *hostMem, ci generated.ConnInfo, s uint64, n int) {
	if ci.Flags&generated.ConnStepSizes != 0 {
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.at(ci.Tail+8+4*(s%generated.Steps), 4)[0])), uint32(n))
	}
}

// postLLSize stores LL step s's size word (lines lines) where the device
// code does, before any of the step's lines, on connections flagged
// ConnStepSizes.
func postLLSize(m *hostMem, ci generated.ConnInfo, s uint64, lines int) {
	if ci.Flags&generated.ConnStepSizes != 0 {
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.at(ci.Tail+8+4*(s%generated.Steps), 4)[0])), llSizeWord(s, lines))
	}
}

// recvKernel reads steps as the device code does and checks them.
func recvKernel(t *testing.T, m *hostMem, ci generated.ConnInfo, ch int, steps uint64, stop *atomic.Bool) {
	head, tail := m.word(ci.Head), m.word(ci.Tail)
	for s := uint64(0); s < steps && !stop.Load(); s++ {
		proto, n := stepPlan(ch, s)
		slot := uint64(ci.BuffSizes[proto]) / generated.Steps
		buf := m.at(ci.Buffs[proto]+(s%generated.Steps)*slot, slot)
		if proto == 2 {
			if !spin(t, fmt.Sprintf("ch%d recv step %d: tail", ch, s), func() bool { return stop.Load() || atomic.LoadUint64(tail) > s }) || stop.Load() {
				return
			}
			for i := range n {
				if buf[i] != stepByte(ch, s, i) {
					t.Errorf("ch%d step %d (SIMPLE) byte %d: %d, want %d", ch, s, i, buf[i], stepByte(ch, s, i))
					return
				}
			}
			// Only the step's bytes travel (ConnStepSizes): the rest of the
			// slot, zeroed when its last step was consumed, holds none of
			// the sender's filler.
			for i := n; i < len(buf); i++ {
				if buf[i] != 0 {
					t.Errorf("ch%d step %d (SIMPLE, %d bytes): byte %d of the slot is %#x: more than the step's bytes travelled", ch, s, n, i, buf[i])
					return
				}
			}
			clear(buf)
		} else {
			f := llFlag(s)
			for l := range n {
				if !spin(t, fmt.Sprintf("ch%d recv step %d line %d", ch, s, l), func() bool { return stop.Load() || llReady(buf[16*l:], f) }) || stop.Load() {
					return
				}
				if buf[16*l] != stepByte(ch, s, 2*l) || buf[16*l+8] != stepByte(ch, s, 2*l+1) {
					t.Errorf("ch%d step %d (LL) line %d differs", ch, s, l)
					return
				}
			}
		}
		atomic.StoreUint64(head, s+1)
	}
}

func TestNETMovesSteps(t *testing.T) {
	for _, tc := range []struct{ ranks, nch, threads, socks int }{{2, 2, 1, 1}, {3, 2, 2, 2}} {
		t.Run(fmt.Sprintf("%dranks_%dx%dsockets", tc.ranks, tc.threads, tc.socks), func(t *testing.T) {
			moveSteps(t, loNet(t, tc.threads, tc.socks), tc.ranks, tc.nch)
		})
	}
}

// TestNETOverPlugin runs NET over an NCCL net plugin: runtime/net's test
// plugin, loaded with dlopen as NCCL_NET_PLUGIN would.
func TestNETOverPlugin(t *testing.T) {
	p, err := ncclnet.LoadPlugin(nettest.BuildPlugin(t, "transport"), ncclnet.PluginOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	moveSteps(t, p, 3, 2)
}

// moveSteps connects ranks ranks on their own hosts through NET over nt
// and moves 120 steps of mixed protocols on nch channels of a ring.
// TestNETMovesStepsWithoutLL128 moves LL and SIMPLE steps over
// connections with no LL128 FIFOs (Sizes[1] == 0, as a communicator
// across hosts sets them up): blocks that much smaller, the same bytes.
func TestNETMovesStepsWithoutLL128(t *testing.T) {
	moveStepsSizes(t, loNet(t, 1, 1), 2, 2, Sizes{netSizes[0], 0, netSizes[2]})
}

func moveSteps(t *testing.T, nt ncclnet.Net, ranks, nch int) {
	t.Helper()
	moveStepsSizes(t, nt, ranks, nch, netSizes)
}

func moveStepsSizes(t *testing.T, nt ncclnet.Net, ranks, nch int, sizes Sizes) {
	t.Helper()
	sets, mems := connectNETSizes(t, nt, ranks, nch, sizes, func(r int, err error) { t.Errorf("rank %d: proxy error: %v", r, err) })
	_, total := blockLayout(sizes)
	require.Equal(t, uint64(nch)*(total+64), sets[0].Bytes(), "rank 0's blocks from its ring predecessor and its send step words, by the sizes")
	require.True(t, proxy.Running())
	const steps = 120
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range ranks {
		next, prev := (r+1)%ranks, (r+ranks-1)%ranks
		for ch := range nch {
			assert.Equal(t, "NET/"+nt.Name(), sets[r].Via[Key{ch, next}])
			wg.Go(func() { sendKernel(t, mems[r], sets[r].Send[Key{ch, next}], ch, steps, &stop) })
			wg.Go(func() { recvKernel(t, mems[r], sets[r].Recv[Key{ch, prev}], ch, steps, &stop) })
		}
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, sets[r].Close())
		assert.Empty(t, mems[r].regs, "every staging block unregistered")
	}
	assert.False(t, proxy.Running(), "the last region's Close stops the proxy")
}

func TestNETVanishedPeer(t *testing.T) {
	nt := loNet(t, 1, 1)
	errs := make(chan error, 8)
	sets, mems := connectNET(t, nt, 2, 1, func(r int, err error) {
		if r == 0 {
			errs <- err
		}
	})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { recvKernel(t, mems[0], sets[0].Recv[Key{0, 1}], 0, 1000, &stop) })
	// Rank 1 goes away (its process is killed: its sockets close, with no
	// goodbye).
	for _, r := range sets[1].regions {
		if nr, ok := r.(*netRegion); ok {
			require.NoError(t, nr.pc.leave(nr.eng))
			nr.pc.killed = true
		}
	}
	require.NoError(t, sets[1].Close())
	select {
	case err := <-errs:
		require.ErrorIs(t, err, ncclnet.ErrPeer)
		require.ErrorContains(t, err, "rank 0")
		require.ErrorContains(t, err, "127.0.0.1:", "names the peer's address")
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0's proxy did not report the vanished peer within 10 s")
	}
	stop.Store(true)
	wg.Wait()
	require.NoError(t, sets[0].Close())
	assert.False(t, proxy.Running())
}

func TestNETCleanCloseIsNoError(t *testing.T) {
	nt := loNet(t, 1, 1)
	errs := make(chan error, 8)
	sets, _ := connectNET(t, nt, 2, 2, func(r int, err error) { errs <- err })
	require.NoError(t, sets[1].Close()) // Destroy on rank 1 first: goodbyes
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, sets[0].Close())
	select {
	case err := <-errs:
		t.Fatalf("a peer's Destroy reported as an error: %v", err)
	default:
	}
}

// A SIMPLE step whose size word exceeds its slot is the kernel's bug: the
// proxy stops with an error that says so instead of shipping past the slot.
func TestNETRejectsOversizeStep(t *testing.T) {
	errs := make(chan error, 8)
	sets, mems := connectNET(t, loNet(t, 1, 1), 2, 1, func(r int, err error) { errs <- err })
	defer func() {
		for _, s := range sets {
			_ = s.Close()
		}
	}()
	ci := sets[0].Send[Key{0, 1}]
	require.NotZero(t, ci.Flags&generated.ConnStepSizes, "NET asks the kernel for step sizes")
	slot := int(ci.BuffSizes[2] / generated.Steps)
	postSize(mems[0], ci, 0, slot+1)
	atomic.StoreUint64(mems[0].word(ci.Tail), 1)
	select {
	case err := <-errs:
		require.ErrorContains(t, err, fmt.Sprintf("SIMPLE step 0 on connection 0 with %d bytes, more than its %d-byte slot", slot+1, slot))
	case <-time.After(10 * time.Second):
		t.Fatal("no error for an oversize step")
	}
}

// fakeSender sets a receiving NET region up on its own and connects to it
// as a peer that speaks the protocol by hand.
type fakeSender struct {
	sc      ncclnet.SendComm
	credits ncclnet.RecvComm
	region  Region
	errs    chan error
}

func newFakeSender(t *testing.T, nt ncclnet.Net) *fakeSender {
	f := &fakeSender{errs: make(chan error, 4)}
	env := &Env{Mem: newHostMem(), Rank: 0, Self: Peer{PID: 1, Host: "a"}, sizes: netSizes, proxyError: func(err error) { f.errs <- err }}
	_, total := blockLayout(netSizes)
	r, err := NET{Net: nt}.SetupRecv(env, Peer{Rank: 1, PID: 2, Host: "b"}, 2*total)
	require.NoError(t, err)
	f.region = r
	var h ncclnet.Handle
	copy(h[:], r.Info()[8:])
	f.sc, err = nt.Connect(0, h)
	require.NoError(t, err)
	ch, l, err := nt.Listen(0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	hb := append([]byte(nil), ch[:]...)
	f.send(t, hb, tagHandle)
	require.Eventually(t, func() bool {
		f.credits, err = nt.Accept(l)
		require.NoError(t, err)
		return f.credits != nil
	}, 5*time.Second, time.Millisecond)
	t.Cleanup(func() { _ = f.sc.Close(); _ = f.credits.Close(); _ = f.region.Close() })
	return f
}

func (f *fakeSender) send(t *testing.T, b []byte, tag int) {
	r, err := f.sc.Isend(b, tag, nil)
	require.NoError(t, err)
	require.NotNil(t, r)
}

func header(kind byte, conn int, step, off, n uint64) []byte {
	b := make([]byte, hdrSize)
	netHeader{kind: kind, conn: conn, step: step, off: off, n: n}.encode(b)
	return b
}

// withBytes is header b with n bytes of payload behind it (an inline step).
func withBytes(b []byte, n int) []byte { return append(b, make([]byte, n)...) }

func TestNETRejectsMalformedTraffic(t *testing.T) {
	nt := loNet(t, 1, 1)
	llSlot, simpleSlot := uint64(netSizes[0]/generated.Steps), uint64(netSizes[2]/generated.Steps)
	garbage := header(kindSimple, 0, 0, 0, 8)
	garbage[0] = 'X'
	for _, tc := range []struct {
		name    string
		msgs    [][]byte
		tags    []int
		want    string
		sizeErr bool
	}{
		{"bad magic", [][]byte{garbage}, []int{tagHeader}, "garbage from the peer", false},
		{"short header", [][]byte{make([]byte, 7)}, []int{tagHeader}, "a 7-byte message header", false},
		{"unknown kind", [][]byte{header(9, 0, 0, 0, 8)}, []int{tagHeader}, "message kind 9", false},
		{"unknown connection", [][]byte{header(kindSimple, 2, 0, 0, 8)}, []int{tagHeader}, "connection 2 of 2", false},
		{"step beyond the window", [][]byte{header(kindSimple, 0, generated.Steps, 0, 8)}, []int{tagHeader}, "step 8 on connection 0 whose receiver consumed 0 steps", false},
		{"past the slot", [][]byte{header(kindSimple, 0, 0, simpleSlot-4, 8)}, []int{tagHeader}, fmt.Sprintf("8 bytes at offset %d of a %d-byte slot", simpleSlot-4, simpleSlot), false},
		{"misaligned LL", [][]byte{header(kindLL, 1, 0, 8, 16)}, []int{tagHeader}, fmt.Sprintf("16 bytes at offset 8 of a %d-byte slot", llSlot), false},
		{"more than announced", [][]byte{withBytes(header(kindSimple, 0, 0, 0, 8), 9)}, []int{tagHeader}, "9 bytes where the header announced 8", false},
		{"less than announced", [][]byte{withBytes(header(kindLL, 0, 0, 0, 32), 16)}, []int{tagHeader}, "16 bytes where the header announced 32", false},
		{"small step without its bytes", [][]byte{header(kindSimple, 0, 0, 0, 8)}, []int{tagHeader}, "0 bytes where the header announced 8", false},
		{"long step inline", [][]byte{withBytes(header(kindSimple, 0, 0, 0, inlineStep+8), 8)}, []int{tagHeader}, fmt.Sprintf("8 bytes behind a header announcing %d to follow apart", inlineStep+8), false},
		{"more than announced apart", [][]byte{header(kindSimple, 0, 0, 0, inlineStep+8), make([]byte, inlineStep+9)}, []int{tagHeader, tagPayload}, fmt.Sprintf("message 2 of %d bytes for a posted receive of %d bytes", inlineStep+9, inlineStep+8), true},
		{"less than announced apart", [][]byte{header(kindSimple, 0, 0, 0, inlineStep+8), make([]byte, 16)}, []int{tagHeader, tagPayload}, fmt.Sprintf("16 bytes where the header announced %d", inlineStep+8), false},
		{"wrong tag", [][]byte{header(kindSimple, 0, 0, 0, 8)}, []int{tagCredit}, "tag 4 where the posted receive has tag 2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSender(t, nt)
			for i, m := range tc.msgs {
				f.send(t, m, tc.tags[i])
			}
			select {
			case err := <-f.errs:
				require.ErrorIs(t, err, ncclnet.ErrPeer)
				require.ErrorContains(t, err, tc.want)
				require.ErrorContains(t, err, "rank 0 receiving from rank 1 (pid 2 on b")
				require.ErrorContains(t, err, "127.0.0.1:", "names the peer's address")
			case <-time.After(10 * time.Second):
				t.Fatal("no error within 10 s")
			}
			// Nothing landed in the staging.
			r := f.region.(*netRegion)
			for i, b := range r.host {
				if b != 0 {
					t.Fatalf("staging byte %d written: %d", i, b)
				}
			}
		})
	}
}

func TestNETRejectsBadCredits(t *testing.T) {
	nt := loNet(t, 1, 1)
	for _, tc := range []struct {
		name   string
		credit func(b []byte)
		want   string
	}{
		{"beyond the window", func(b []byte) { binary.LittleEndian.PutUint64(b[8:], generated.Steps+1) }, "a credit to step 9 on connection 0 whose head is 0"},
		{"unknown connection", func(b []byte) { binary.LittleEndian.PutUint32(b, 5) }, "a credit for connection 5 of 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(chan error, 4)
			_, total := blockLayout(netSizes)
			mem := newHostMem()
			// A receiver of our own, then the sender under test.
			renv := &Env{Mem: newHostMem(), Rank: 1, sizes: netSizes, proxyError: func(error) {}}
			rr, err := NET{Net: nt}.SetupRecv(renv, Peer{PID: 1, Host: "a"}, total)
			require.NoError(t, err)
			env := &Env{Mem: mem, Rank: 0, sizes: netSizes, proxyError: func(err error) { errs <- err }}
			sr, err := NET{Net: nt}.ConnectSend(context.Background(), env, 1, Peer{PID: 2, Host: "b"}, rr.Info())
			require.NoError(t, err)
			defer func() { _ = sr.Close(); _ = rr.Close() }()
			// Take the receiver out of the proxy once it is connected, and
			// forge a credit on its credit connection.
			reg := rr.(*netRegion)
			for deadline := time.Now().Add(5 * time.Second); ; {
				require.True(t, time.Now().Before(deadline), "the receiver never connected")
				time.Sleep(time.Millisecond)
				require.NoError(t, reg.eng.Remove(reg.pc))
				if reg.pc.ready {
					break
				}
				require.NoError(t, reg.eng.Add(context.Background(), reg, reg.pc, nil))
			}
			buf := make([]byte, creditSize)
			tc.credit(buf)
			r, err := rr.(*netRegion).pc.send.Isend(buf, tagCredit, nil)
			require.NoError(t, err)
			require.NotNil(t, r)
			select {
			case err := <-errs:
				require.ErrorIs(t, err, ncclnet.ErrPeer)
				require.ErrorContains(t, err, tc.want)
				require.ErrorContains(t, err, "rank 0 sending to rank 1")
			case <-time.After(10 * time.Second):
				t.Fatal("no error within 10 s")
			}
		})
	}
}

// netConnOf is rank set's proxy connection that sends (or receives).
func netConnOf(t *testing.T, set *Set, sender bool) *netConn {
	for _, r := range set.regions {
		if nr, ok := r.(*netRegion); ok && nr.pc.sender == sender {
			return nr.pc
		}
	}
	t.Fatalf("no NET region (sender %v)", sender)
	return nil
}

// A small step is one message (header and bytes, one writev), and the
// receiver credits creditBatch steps at a time: over a ping of single LL
// lines the sender writes once per step, the receiver once per
// creditBatch steps, and the summary counts them.
func TestNETSmallStepIsOneMessage(t *testing.T) {
	sets, mems := connectNET(t, loNet(t, 1, 1), 2, 1, func(r int, err error) { t.Errorf("rank %d: proxy error: %v", r, err) })
	defer func() {
		for _, s := range sets {
			require.NoError(t, s.Close())
		}
	}()
	send, recv := sets[0].Send[Key{0, 1}], sets[1].Recv[Key{0, 0}]
	line := func(m *hostMem, ci generated.ConnInfo, s uint64) []byte {
		slot := uint64(ci.BuffSizes[0]) / generated.Steps
		return m.at(ci.Buffs[0]+(s%generated.Steps)*slot, 16)
	}
	sc := netConnOf(t, sets[0], true)
	st := sc.send.(interface{ Stats() ncclnet.SocketStats })
	before := st.Stats().Writes
	const steps = 40
	for s := uint64(0); s < steps; s++ {
		require.True(t, spin(t, "send head", func() bool { return atomic.LoadUint64(mems[0].word(send.Head))+generated.Steps > s }))
		buf, f := line(mems[0], send, s), uint64(llFlag(s))
		postLLSize(mems[0], send, s, 1)
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[8])), f<<32|s)
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[0])), f<<32|s)
		in := line(mems[1], recv, s)
		require.True(t, spin(t, "recv line", func() bool { return llReady(in, llFlag(s)) }))
		require.Equal(t, byte(s), in[0])
		atomic.StoreUint64(mems[1].word(recv.Head), s+1)
	}
	// The receiver credits creditBatch consumed steps at a time: the
	// sender's head ends within that of the steps.
	require.True(t, spin(t, "credits", func() bool {
		return atomic.LoadUint64(mems[0].word(send.Head)) > steps-creditBatch
	}))
	assert.Equal(t, uint64(steps), st.Stats().Writes-before, "writev calls for %d one-line LL steps", steps)

	rc := netConnOf(t, sets[1], false)
	e := proxy.Acquire()
	for _, c := range []*netConn{sc, rc} {
		require.NoError(t, c.leave(e)) // the proxy lets go of its stats
	}
	e.Release()
	t.Log(sc.stats.summary(sc))
	t.Log(rc.stats.summary(rc))
	assert.Contains(t, sc.stats.summary(sc), fmt.Sprintf("LL %d steps %d B; ready->sent n=%d", steps, 16*steps, steps))
	assert.Contains(t, rc.stats.summary(rc), fmt.Sprintf("LL %d steps %d B; arrived->stored n=%d", steps, 16*steps, steps))
	assert.Contains(t, rc.stats.summary(rc), "hop (sender saw ready->stored, one host's clock) n=40")
	// A ping never gets within creditNear slots of stalling: a credit
	// covers creditBatch steps, or more when the receiving proxy ran
	// behind (a loaded machine), never fewer; and at least one per
	// FIFO's depth, or the sender would have stalled.
	assert.LessOrEqual(t, rc.stats.credits, uint64(steps/creditBatch), "credits for %d steps", steps)
	assert.GreaterOrEqual(t, rc.stats.credits, uint64(steps/generated.Steps), "credits for %d steps", steps)
}

// With LL size words the sender's proxy knows when an LL step is
// complete: it ships a step of no lines (which used to stay open until
// credits passed it) without a message, tells it from a SIMPLE step when
// tail passes it, and, with every posted step shipped and no credits
// back, looks at one step per pass (the next, not started) instead of
// every slot of the credit window.
func TestNETLLSizeWordsCloseSteps(t *testing.T) {
	sets, mems := connectNET(t, loNet(t, 1, 1), 2, 1, func(r int, err error) { t.Errorf("rank %d: proxy error: %v", r, err) })
	defer func() {
		for _, s := range sets {
			require.NoError(t, s.Close())
		}
	}()
	send, recv := sets[0].Send[Key{0, 1}], sets[1].Recv[Key{0, 0}]
	require.NotZero(t, send.Flags&generated.ConnStepSizes)
	plan := []struct{ proto, n int }{{0, 3}, {0, 0}, {2, 100}, {0, 0}, {0, 2}, {0, 5}} // LL: lines, SIMPLE: bytes
	slotOf := func(m *hostMem, ci generated.ConnInfo, proto int, s uint64) []byte {
		slot := uint64(ci.BuffSizes[proto]) / generated.Steps
		return m.at(ci.Buffs[proto]+(s%generated.Steps)*slot, slot)
	}
	for s, st := range plan {
		s := uint64(s)
		buf := slotOf(mems[0], send, st.proto, s)
		if st.proto == 2 {
			for i := range st.n {
				buf[i] = stepByte(0, s, i)
			}
			postSize(mems[0], send, s, st.n)
			atomic.StoreUint64(mems[0].word(send.Tail), s+1)
			continue
		}
		postLLSize(mems[0], send, s, st.n)
		f := uint64(llFlag(s))
		for l := range st.n {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l+8])), uint64(stepByte(0, s, 2*l+1))|f<<32)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&buf[16*l])), uint64(stepByte(0, s, 2*l))|f<<32)
		}
	}
	for s, st := range plan {
		s := uint64(s)
		buf := slotOf(mems[1], recv, st.proto, s)
		if st.proto == 2 {
			require.True(t, spin(t, fmt.Sprintf("step %d: tail", s), func() bool { return atomic.LoadUint64(mems[1].word(recv.Tail)) > s }))
			for i := range st.n {
				require.Equal(t, stepByte(0, s, i), buf[i], "step %d byte %d", s, i)
			}
			continue
		}
		for l := range st.n {
			require.True(t, spin(t, fmt.Sprintf("step %d line %d", s, l), func() bool { return llReady(buf[16*l:], llFlag(s)) }))
			require.Equal(t, stepByte(0, s, 2*l), buf[16*l], "step %d line %d", s, l)
			require.Equal(t, stepByte(0, s, 2*l+1), buf[16*l+8], "step %d line %d", s, l)
		}
	}
	// Everything arrived; the proxy keeps passing with no credits back.
	time.Sleep(100 * time.Millisecond)
	atomic.StoreUint64(mems[1].word(recv.Head), uint64(len(plan)))
	require.True(t, spin(t, "credits", func() bool {
		return atomic.LoadUint64(mems[0].word(send.Head)) > uint64(len(plan)-creditBatch)
	}))
	sc := netConnOf(t, sets[0], true)
	e := proxy.Acquire()
	require.NoError(t, sc.leave(e))
	e.Release()
	t.Log(sc.stats.summary(sc))
	assert.Equal(t, uint64(3), sc.stats.msgs[kindLL], "LL messages: one per step with lines")
	assert.Equal(t, uint64(1), sc.stats.msgs[kindSimple], "SIMPLE messages")
	require.Greater(t, sc.passes, uint64(20), "proxy passes in 100 ms")
	// Every step is looked at about once while it is open, then the
	// next one once per pass; scanning the credit window would look at
	// Steps-len(plan)+... several per pass.
	assert.LessOrEqual(t, sc.stats.llLooks, sc.passes+2*uint64(len(plan)), "LL scan looks in %d passes", sc.passes)
}
