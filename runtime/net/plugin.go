package net

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "plugin_abi.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/config"
)

// PluginVersions are the ABI versions the loader looks for, newest first:
// a plugin must export ncclNetPlugin_v10, _v9 or _v8.
var PluginVersions = []int{10, 9, 8}

// PluginError is a net plugin call that returned an error code.
type PluginError struct {
	Plugin string // the plugin's name
	Op     string // the call ("isend", "init", ...)
	Code   int    // the ncclResult_t
	// LastWarning is the last warning the plugin logged (any thread,
	// any connection) before the error, when there was one.
	LastWarning string
}

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}

// CodeName is the ncclResult_t's name, or its number.
func CodeName(code int) string {
	if code >= 0 && code < len(resultNames) {
		return resultNames[code]
	}
	return fmt.Sprintf("ncclResult_t(%d)", code)
}

func (e *PluginError) Error() string {
	s := fmt.Sprintf("net plugin %s: %s returned %s (%d)", e.Plugin, e.Op, CodeName(e.Code), e.Code)
	if e.LastWarning != "" {
		s += "; its last warning: " + e.LastWarning
	}
	return s
}

// The ncclRemoteError code: what a plugin returns when the peer failed.
const codeRemoteError = 6

// Is makes a remote error match ErrPeer.
func (e *PluginError) Is(target error) bool { return target == ErrPeer && e.Code == codeRemoteError }

// ErrNoPlugin is wrapped by LoadPlugin's error when no library could be
// opened.
var ErrNoPlugin = errors.New("net: no such net plugin")

// PluginOptions configure LoadPlugin.
type PluginOptions struct {
	// Logger receives the plugin's log lines (at its init and later, from
	// any thread); nil drops them. The plugins of a process share one
	// logger: the last non-nil one given.
	Logger *slog.Logger
}

// pluginLib is one opened library; the process keeps each open (a plugin
// may run threads of its own, so it cannot be unloaded safely) and
// initializes it once, as NCCL does.
type pluginLib struct {
	path string
	p    *C.ngnet_plugin // C memory: the table pointer is in it
	name string
	ndev int
	err  error
}

var plugins struct {
	mu   sync.Mutex
	libs map[string]*pluginLib // by the name that opened it
}

var (
	pluginLog  atomic.Pointer[slog.Logger]
	lastWarnMu sync.Mutex
	lastWarn   string
)

//export ngnetGoLog
func ngnetGoLog(level C.int, flags C.ulong, file *C.char, line C.int, msg *C.char) {
	m := strings.TrimRight(C.GoString(msg), "\n")
	if level == C.ngnetLogWarn || level == C.ngnetLogAbort {
		lastWarnMu.Lock()
		lastWarn = m
		lastWarnMu.Unlock()
	}
	l := pluginLog.Load()
	if l == nil {
		return
	}
	lv := slog.LevelInfo
	switch level {
	case C.ngnetLogVersion:
		lv = config.LevelVersion
	case C.ngnetLogWarn:
		lv = slog.LevelWarn
	case C.ngnetLogAbort:
		lv = slog.LevelError
	case C.ngnetLogTrace:
		lv = slog.LevelDebug
	}
	l.Log(context.Background(), lv, m, config.Subsys(flags).Attr(), "file", C.GoString(file), "line", int(line))
}

func takeLastWarning() string {
	lastWarnMu.Lock()
	defer lastWarnMu.Unlock()
	w := lastWarn
	lastWarn = ""
	return w
}

// pluginCandidates are the files NCCL tries for NCCL_NET_PLUGIN=name: the
// name itself, then libnccl-net-<name>.so unless the name is a path or
// already a library's file name; "" means libnccl-net.so.
func pluginCandidates(name string) []string {
	if name == "" {
		return []string{"libnccl-net.so"}
	}
	c := []string{name}
	if !strings.Contains(name, "/") && !(strings.HasPrefix(name, "lib") && strings.HasSuffix(name, ".so")) {
		c = append(c, "libnccl-net-"+name+".so")
	}
	return c
}

// LoadPlugin loads the NCCL net plugin that NCCL_NET_PLUGIN=name would
// (see pluginCandidates; "" tries libnccl-net.so), resolves its newest
// supported ABI (PluginVersions), initializes it and returns it as a Net.
// Errors name the files tried (wrapping ErrNoPlugin when none opened), the
// versions looked for, or the code init returned. A library is opened and
// initialized once per process; later loads of the same name share it.
func LoadPlugin(name string, o PluginOptions) (*Plugin, error) {
	if o.Logger != nil {
		pluginLog.Store(o.Logger)
	}
	plugins.mu.Lock()
	defer plugins.mu.Unlock()
	if plugins.libs == nil {
		plugins.libs = map[string]*pluginLib{}
	}
	lib, ok := plugins.libs[name]
	if !ok {
		lib = openPlugin(name)
		plugins.libs[name] = lib
	}
	if lib.err != nil {
		return nil, lib.err
	}
	return &Plugin{lib: lib, pending: map[Handle]unsafe.Pointer{}}, nil
}

func openPlugin(name string) *pluginLib {
	var tried []string
	var h unsafe.Pointer
	var path string
	errBuf := (*C.char)(C.malloc(512))
	defer C.free(unsafe.Pointer(errBuf))
	for _, c := range pluginCandidates(name) {
		cs := C.CString(c)
		h = C.ngnet_open(cs, errBuf, 512)
		C.free(unsafe.Pointer(cs))
		if h != nil {
			path = c
			break
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", c, C.GoString(errBuf)))
	}
	if h == nil {
		return &pluginLib{err: fmt.Errorf("%w: NCCL_NET_PLUGIN=%q: could not open %s", ErrNoPlugin, name, strings.Join(tried, ", nor "))}
	}
	lib := &pluginLib{path: path, p: (*C.ngnet_plugin)(C.calloc(1, C.sizeof_ngnet_plugin))}
	if C.ngnet_find(h, lib.p) == 0 {
		syms := make([]string, len(PluginVersions))
		for i, v := range PluginVersions {
			syms[i] = fmt.Sprintf("ncclNetPlugin_v%d", v)
		}
		lib.err = fmt.Errorf("net: plugin %s exports none of the supported versions (looked for %s)", path, strings.Join(syms, ", "))
		return lib
	}
	if n := C.ngnet_name(lib.p); n != nil {
		lib.name = C.GoString(n)
	}
	if lib.name == "" {
		lib.name = path
	}
	if rc := C.ngnet_init(lib.p); rc != 0 {
		lib.err = fmt.Errorf("net: plugin %s (%s, v%d): %w", path, lib.name, lib.p.version, lib.errCode("init", rc))
		return lib
	}
	var n C.int
	if rc := C.ngnet_devices(lib.p, &n); rc != 0 {
		lib.err = fmt.Errorf("net: plugin %s: %w", path, lib.errCode("devices", rc))
		return lib
	}
	lib.ndev = int(n)
	return lib
}

func (l *pluginLib) errCode(op string, rc C.int) error {
	return &PluginError{Plugin: l.name, Op: op, Code: int(rc), LastWarning: takeLastWarning()}
}

// Plugin is an NCCL net plugin seen as a Net. Its buffers must not be Go
// memory (the plugin keeps pointers to them until their requests
// complete).
type Plugin struct {
	lib *pluginLib
	mu  sync.Mutex
	// pending connects, by the handle they were given: a plugin may keep
	// its connection state in the handle (NCCL's own do), so every call
	// of one connect must see the same C copy.
	pending map[Handle]unsafe.Pointer
	closed  bool
	nextID  atomic.Uint64
}

// Name implements Net: the name the plugin gives itself.
func (p *Plugin) Name() string { return p.lib.name }

// Path is the library file that was opened.
func (p *Plugin) Path() string { return p.lib.path }

// Version is the ABI version in use (one of PluginVersions).
func (p *Plugin) Version() int { return int(p.lib.p.version) }

// Devices implements Net.
func (p *Plugin) Devices() int { return p.lib.ndev }

func (p *Plugin) checkDev(dev int) error {
	if dev < 0 || dev >= p.lib.ndev {
		return fmt.Errorf("net: plugin %s: device %d: want 0 to %d", p.lib.name, dev, p.lib.ndev-1)
	}
	return nil
}

func (p *Plugin) fail(op string, rc C.int) error { return p.lib.errCode(op, rc) }

// Properties implements Net.
func (p *Plugin) Properties(dev int) (Properties, error) {
	if err := p.checkDev(dev); err != nil {
		return Properties{}, err
	}
	var q C.ngnet_props
	if rc := C.ngnet_properties(p.lib.p, C.int(dev), &q); rc != 0 {
		return Properties{}, p.fail("getProperties", rc)
	}
	pr := Properties{GUID: uint64(q.guid), PtrSupport: PtrType(q.ptrSupport), RegIsGlobal: q.regIsGlobal != 0,
		Speed: int(q.speed), Port: int(q.port), Latency: float64(q.latency), MaxComms: int(q.maxComms), MaxRecvs: int(q.maxRecvs)}
	if q.name != nil {
		pr.Name = C.GoString(q.name)
	}
	if q.pciPath != nil {
		pr.PCIPath = C.GoString(q.pciPath)
	}
	return pr, nil
}

type pluginListener struct {
	p    *Plugin
	comm unsafe.Pointer
}

// Listen implements Net.
func (p *Plugin) Listen(dev int) (Handle, Listener, error) {
	var h Handle
	if err := p.checkDev(dev); err != nil {
		return h, nil, err
	}
	ch := C.calloc(1, HandleSize)
	defer C.free(ch)
	var comm unsafe.Pointer
	if rc := C.ngnet_listen(p.lib.p, C.int(dev), ch, &comm); rc != 0 {
		return h, nil, p.fail("listen", rc)
	}
	copy(h[:], unsafe.Slice((*byte)(ch), HandleSize))
	return h, &pluginListener{p: p, comm: comm}, nil
}

// Close implements Listener.
func (l *pluginListener) Close() error {
	if l.comm == nil {
		return nil
	}
	rc := C.ngnet_close_listen(l.p.lib.p, l.comm)
	l.comm = nil
	if rc != 0 {
		return l.p.fail("closeListen", rc)
	}
	return nil
}

// Connect implements Net. Until the plugin returns a comm, calls with the
// same handle continue the same connect.
func (p *Plugin) Connect(dev int, h Handle) (SendComm, error) {
	if err := p.checkDev(dev); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	ch, ok := p.pending[h]
	if !ok {
		ch = C.malloc(HandleSize)
		copy(unsafe.Slice((*byte)(ch), HandleSize), h[:])
		p.pending[h] = ch
	}
	var comm unsafe.Pointer
	rc := C.ngnet_connect(p.lib.p, C.int(dev), ch, &comm)
	if rc != 0 || comm != nil {
		delete(p.pending, h)
		C.free(ch)
	}
	if rc != 0 {
		return nil, p.fail("connect", rc)
	}
	if comm == nil {
		return nil, nil
	}
	return &pluginSend{pluginComm{p: p, comm: comm, peer: p.peerName("send", dev)}}, nil
}

func (p *Plugin) peerName(side string, dev int) string {
	return fmt.Sprintf("%s %s connection %d (device %d)", p.lib.name, side, p.nextID.Add(1), dev)
}

// Accept implements Net.
func (p *Plugin) Accept(l Listener) (RecvComm, error) {
	pl, ok := l.(*pluginListener)
	if !ok || pl.p.lib != p.lib {
		return nil, fmt.Errorf("net: plugin %s: Accept of a %T, not one of its listeners", p.lib.name, l)
	}
	if pl.comm == nil {
		return nil, ErrClosed
	}
	var comm unsafe.Pointer
	if rc := C.ngnet_accept(p.lib.p, pl.comm, &comm); rc != 0 {
		return nil, p.fail("accept", rc)
	}
	if comm == nil {
		return nil, nil
	}
	return &pluginRecv{pluginComm{p: p, comm: comm, peer: p.peerName("recv", -1)}}, nil
}

// Close implements Net: it frees the state of connects never completed.
// The library stays loaded and initialized (see LoadPlugin).
func (p *Plugin) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for h, ch := range p.pending {
		C.free(ch)
		delete(p.pending, h)
	}
	p.closed = true
	return nil
}

type pluginComm struct {
	p    *Plugin
	comm unsafe.Pointer // nil once closed
	peer string
}

type pluginMr struct {
	comm unsafe.Pointer
	mh   unsafe.Pointer
}

func (c *pluginComm) Peer() string { return c.peer }

func (c *pluginComm) fail(op string, rc C.int) error {
	err := c.p.fail(op, rc)
	if rc == codeRemoteError {
		return &PeerError{Peer: c.peer, Op: op, Err: err}
	}
	return fmt.Errorf("net: %s: %w", c.peer, err)
}

// bufPtr is buf's address, also when it is empty.
func bufPtr(buf []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(buf)) }

func (c *pluginComm) RegMr(buf []byte, t PtrType) (MemHandle, error) {
	if c.comm == nil {
		return nil, ErrClosed
	}
	var mh unsafe.Pointer
	if rc := C.ngnet_reg_mr(c.p.lib.p, c.comm, bufPtr(buf), C.size_t(len(buf)), C.int(t), &mh); rc != 0 {
		return nil, c.fail("regMr", rc)
	}
	return &pluginMr{comm: c.comm, mh: mh}, nil
}

func (c *pluginComm) DeregMr(m MemHandle) error {
	mr, ok := m.(*pluginMr)
	if !ok || mr.comm != c.comm || c.comm == nil {
		return fmt.Errorf("net: %s: DeregMr of %v: not a registration of this connection", c.peer, m)
	}
	if rc := C.ngnet_dereg_mr(c.p.lib.p, c.comm, mr.mh); rc != 0 {
		return c.fail("deregMr", rc)
	}
	return nil
}

func (c *pluginComm) mh(m MemHandle) (unsafe.Pointer, error) {
	if m == nil {
		return nil, nil
	}
	mr, ok := m.(*pluginMr)
	if !ok || mr.comm != c.comm {
		return nil, fmt.Errorf("net: %s: memory handle %v is not a registration of this connection", c.peer, m)
	}
	return mr.mh, nil
}

func (c *pluginComm) checkLen(n int) error {
	if c.p.lib.p.version == 8 && n > math.MaxInt32 {
		return fmt.Errorf("net: %s: a %d-byte message: plugin ABI v8 takes at most %d bytes", c.peer, n, math.MaxInt32)
	}
	return nil
}

type pluginRequest struct {
	c      *pluginComm
	req    unsafe.Pointer
	posted int // bytes posted
	done   bool
	size   int
	err    error
}

// Test implements Request; once the request completed (or failed) the
// answer is kept, as the plugin frees the request.
func (r *pluginRequest) Test() (bool, int, error) {
	if r.done || r.err != nil {
		return r.done, r.size, r.err
	}
	if r.c.comm == nil {
		r.err = ErrClosed
		return false, 0, r.err
	}
	var done, size C.int
	if rc := C.ngnet_test(r.c.p.lib.p, r.req, &done, &size); rc != 0 {
		r.err = r.c.fail("test", rc)
		return false, 0, r.err
	}
	if done == 0 {
		return false, 0, nil
	}
	if size < 0 || int(size) > r.posted {
		r.err = fmt.Errorf("net: %s: plugin %s reports a %d-byte message for a request of %d bytes", r.c.peer, r.c.p.lib.name, int(size), r.posted)
		return false, 0, r.err
	}
	r.done, r.size = true, int(size)
	return true, r.size, nil
}

func (c *pluginComm) close(f func(*C.ngnet_plugin, unsafe.Pointer) C.int, op string) error {
	if c.comm == nil {
		return nil
	}
	rc := f(c.p.lib.p, c.comm)
	c.comm = nil
	if rc != 0 {
		return fmt.Errorf("net: %s: %w", c.peer, c.p.fail(op, rc))
	}
	return nil
}

type pluginSend struct{ pluginComm }

// Isend implements SendComm.
func (s *pluginSend) Isend(buf []byte, tag int, m MemHandle) (Request, error) {
	if s.comm == nil {
		return nil, ErrClosed
	}
	mh, err := s.mh(m)
	if err != nil {
		return nil, err
	}
	if err := s.checkLen(len(buf)); err != nil {
		return nil, err
	}
	var req unsafe.Pointer
	if rc := C.ngnet_isend(s.p.lib.p, s.comm, bufPtr(buf), C.size_t(len(buf)), C.int(tag), mh, &req); rc != 0 {
		return nil, s.fail("isend", rc)
	}
	if req == nil {
		return nil, nil
	}
	return &pluginRequest{c: &s.pluginComm, req: req, posted: len(buf)}, nil
}

// Close implements SendComm.
func (s *pluginSend) Close() error {
	return s.close(func(p *C.ngnet_plugin, c unsafe.Pointer) C.int { return C.ngnet_close_send(p, c) }, "closeSend")
}

type pluginRecv struct{ pluginComm }

// Irecv implements RecvComm.
func (r *pluginRecv) Irecv(buf []byte, tag int, m MemHandle) (Request, error) {
	if r.comm == nil {
		return nil, ErrClosed
	}
	mh, err := r.mh(m)
	if err != nil {
		return nil, err
	}
	if err := r.checkLen(len(buf)); err != nil {
		return nil, err
	}
	var req unsafe.Pointer
	if rc := C.ngnet_irecv(r.p.lib.p, r.comm, bufPtr(buf), C.size_t(len(buf)), C.int(tag), mh, &req); rc != 0 {
		return nil, r.fail("irecv", rc)
	}
	if req == nil {
		return nil, nil
	}
	return &pluginRequest{c: &r.pluginComm, req: req, posted: len(buf)}, nil
}

// Close implements RecvComm.
func (r *pluginRecv) Close() error {
	return r.close(func(p *C.ngnet_plugin, c unsafe.Pointer) C.int { return C.ngnet_close_recv(p, c) }, "closeRecv")
}
