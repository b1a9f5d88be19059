// Package net is the network layer of the NET transport: an interface
// shaped like NCCL's net plugin API (ncclNet_v8), a socket backend (NCCL's
// "Socket" net) and a loader for existing NCCL net plugins
// (libnccl-net-*.so exporting ncclNetPlugin_v8, v9 or v10: LoadPlugin,
// Plugin).
//
// As in NCCL, a connection is one direction: the receiver listens and
// publishes its Handle; the sender connects with it (Connect) and the
// receiver accepts (Accept); both may need several calls (nil comm, nil
// error: call again). Data moves in messages: Isend posts one, Irecv posts
// one buffer to receive the next message into, Test polls either. Messages
// are matched in the order posted; a message longer than the posted buffer
// is an error (the receiver never writes past what it posted), as is a tag
// that differs from the posted one. Buffers must stay untouched until their
// request completes, and must not be Go heap memory when the backend is a
// plugin (C code keeps them): the transport passes host-pinned staging
// buffers.
//
// The socket backend's environment (SocketOptionsFromEnv):
// NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY select the devices;
// NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD the data sockets of a
// connection; NCCLGO_SOCKET_BUFSIZE their kernel buffers;
// NCCLGO_SOCKET_CHUNK the smallest piece of a message on one of them;
// NCCLGO_SOCKET_INLINE the largest message that rides the control socket
// instead (default 64 KiB); NCCLGO_SOCKET_WAIT where a helper waits
// on a data socket: "poller" (the default) in Go's poller, "ppoll" in
// ppoll(2), holding its P; NCCLGO_SOCKET_SPLICE=1 lets a sender splice (vmsplice(2) + splice(2))
// the chunks of buffers registered with RegMr into its data sockets
// instead of copying them, 0 or unset writes them (the default). A
// spliced buffer's bytes are read by the kernel until the receiver has
// them, which can be after the send completed: with splicing on, a
// registered buffer must stay unchanged until the receiver has the
// message, and must not be Go heap memory. The NET transport's staging
// meets both (it is mmap'd, and a slot is rewritten only after the
// receiver's credit, which follows its read).
//
// A request may make progress only while it is tested (plugins such as
// NCCL's InfiniBand one move data in test): poll every pending request,
// sends included.
//
// Every error that the peer causes (it closed the connection, sent bytes
// that contradict the protocol) wraps ErrPeer and names the peer: its
// address for the socket backend; for a plugin, which knows no addresses,
// the connection (the plugin's ncclRemoteError). Whether a plugin checks
// tags and sizes is up to it; the loader checks that no request reports
// more bytes than were posted.
package net

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/ncclgo/ncclgo/runtime/config"
)

// HandleSize is the size of a listen handle (NCCL_NET_HANDLE_MAXSIZE).
const HandleSize = 128

// Handle is what the receiver publishes for the sender to connect with.
type Handle [HandleSize]byte

// PtrType is the kind of memory a buffer is (NCCL_PTR_*).
type PtrType int

// The pointer types, as bits of Properties.PtrSupport.
const (
	PtrHost   PtrType = 1 // host memory
	PtrCUDA   PtrType = 2 // device memory (GPUDirect RDMA)
	PtrDMABuf PtrType = 4 // device memory through dma-buf
)

// Properties describe a network device (ncclNetProperties_v8_t).
type Properties struct {
	Name        string
	PCIPath     string
	GUID        uint64
	PtrSupport  PtrType // bits: which memory Isend/Irecv accept
	RegIsGlobal bool
	Speed       int     // Mbit/s
	Port        int     // port number, for devices with several
	Latency     float64 // µs
	MaxComms    int     // connections the device supports
	MaxRecvs    int     // buffers one Irecv may group (1 here)
}

// Net is a network backend.
type Net interface {
	// Name is the backend's name in the logs ("Socket", a plugin's name).
	Name() string
	// Devices is the number of devices.
	Devices() int
	// Properties describes device dev.
	Properties(dev int) (Properties, error)
	// Listen starts listening on device dev.
	Listen(dev int) (Handle, Listener, error)
	// Connect connects to the listener whose handle h is; a nil comm and a
	// nil error mean "not yet, call again".
	Connect(dev int, h Handle) (SendComm, error)
	// Accept accepts the next connection on l; a nil comm and a nil error
	// mean "not yet, call again".
	Accept(l Listener) (RecvComm, error)
	// Close releases the backend; its comms must be closed.
	Close() error
}

// Listener is a listening endpoint.
type Listener interface {
	Close() error
}

// MemHandle is a registration of a buffer with a comm.
type MemHandle any

// Request is a posted send or receive.
type Request interface {
	// Test reports whether the request completed and, when it did, the
	// message's size. A failed request returns the comm's error.
	Test() (done bool, size int, err error)
}

// SendComm is the sending side of a connection.
type SendComm interface {
	// RegMr registers buf (memory of type t) for Isend.
	RegMr(buf []byte, t PtrType) (MemHandle, error)
	DeregMr(MemHandle) error
	// Isend posts buf as one message with tag; a nil request and a nil
	// error mean "not now, call again".
	Isend(buf []byte, tag int, mh MemHandle) (Request, error)
	// Peer names the other side in errors and logs.
	Peer() string
	// Close closes the connection; pending requests fail.
	Close() error
}

// RecvComm is the receiving side of a connection.
type RecvComm interface {
	RegMr(buf []byte, t PtrType) (MemHandle, error)
	DeregMr(MemHandle) error
	// Irecv posts buf for the next message, which must carry tag and be at
	// most len(buf) bytes long; a nil request and a nil error mean "not
	// now, call again".
	Irecv(buf []byte, tag int, mh MemHandle) (Request, error)
	Peer() string
	Close() error
}

// ErrPeer is wrapped by the errors that the peer causes: it vanished, or
// sent what contradicts the protocol or the posted receive.
var ErrPeer = errors.New("net: peer failed")

// ErrClosed is returned by the operations on a closed comm.
var ErrClosed = errors.New("net: use of a closed connection")

// PeerError is an error of the peer named Peer.
type PeerError struct {
	Peer string // the peer's address
	Op   string // what this side was doing
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("net: peer %s: %s: %v", e.Peer, e.Op, e.Err) }

// Unwrap returns ErrPeer and the cause.
func (e *PeerError) Unwrap() []error { return []error{ErrPeer, e.Err} }

// FromEnv returns the network that NCCL's variables choose, read through
// getenv, as NCCL does:
//
//   - NCCL_NET_PLUGIN: "none" loads no plugin; unset tries libnccl-net.so
//     and, when it cannot be opened or used, falls back to the socket
//     backend (logged); a name loads that plugin (LoadPlugin), and any
//     failure to is an error.
//   - NCCL_NET: "Socket" forces the socket backend; another name must be
//     the loaded plugin's name (case-insensitive).
//   - The socket backend is configured by NCCL_SOCKET_IFNAME,
//     NCCL_SOCKET_FAMILY, NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD.
//
// A plugin's log lines go to stderr through NCCL_DEBUG and
// NCCL_DEBUG_SUBSYS's filter.
func FromEnv(getenv func(string) string) (Net, error) {
	want := getenv("NCCL_NET")
	if !strings.EqualFold(want, "Socket") {
		name, set := getenv("NCCL_NET_PLUGIN"), getenv("NCCL_NET_PLUGIN") != ""
		if !strings.EqualFold(name, "none") {
			log := envLogger(getenv)
			p, err := LoadPlugin(name, PluginOptions{Logger: log})
			switch {
			case err == nil && p.Devices() == 0:
				err = fmt.Errorf("net: plugin %s (%s) has no devices", p.Path(), p.Name())
			case err == nil && want != "" && !strings.EqualFold(want, p.Name()):
				err = fmt.Errorf("net: NCCL_NET=%q: the plugin %s is %q; want its name or Socket", want, p.Path(), p.Name())
			}
			if err == nil {
				return p, nil
			}
			if set || want != "" && !errors.Is(err, ErrNoPlugin) {
				return nil, err
			}
			if !errors.Is(err, ErrNoPlugin) {
				log.Warn("net plugin unusable, using the socket backend", "err", err, config.SubsysNet.Attr())
			}
		}
		if want != "" {
			return nil, fmt.Errorf("net: NCCL_NET=%q: no plugin of that name loaded (NCCL_NET_PLUGIN=%q); want Socket", want, name)
		}
	}
	o, err := SocketOptionsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	o.Interface, o.Family = getenv("NCCL_SOCKET_IFNAME"), getenv("NCCL_SOCKET_FAMILY")
	return NewSocket(o)
}

var logger struct {
	once sync.Once
	l    *slog.Logger
}

// Logger is the process's logger for NET's lines: stderr, filtered by
// NCCL_DEBUG and NCCL_DEBUG_SUBSYS as read from the environment once.
func Logger() *slog.Logger {
	logger.once.Do(func() { logger.l = envLogger(os.Getenv) })
	return logger.l
}

// envLogger is a logger to stderr filtered by NCCL_DEBUG and
// NCCL_DEBUG_SUBSYS (ill-formed values leave the defaults: the comm's
// configuration reports them).
func envLogger(getenv func(string) string) *slog.Logger {
	cfg := config.Default()
	if l, err := config.ParseDebugLevel(getenv("NCCL_DEBUG")); err == nil && getenv("NCCL_DEBUG") != "" {
		cfg.Debug = l
	}
	if s, err := config.ParseSubsys(getenv("NCCL_DEBUG_SUBSYS")); err == nil && getenv("NCCL_DEBUG_SUBSYS") != "" {
		cfg.DebugSubsys = s
	}
	return config.NewLogger(cfg, os.Stderr)
}
