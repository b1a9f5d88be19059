package comm

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/kernels"
)

// Settings are what a communicator's options resolve to (package ncclgo's
// Options over the environment).
type Settings struct {
	Config     config.Config
	Log        *slog.Logger
	LogFile    *SharedCloser // the log's file, shared by the communicators using it; nil with a caller's logger
	Bootstrap  bootstrap.Options
	Image      string // the kernel set's path ("" searches)
	ImageBytes []byte // the kernel set itself (wins over Image)
	P2PPerPeer int    // channels between two ranks; 0: what their paths support (p2pchan.go)
	Contexts   map[int]*cuda.Context
	// OneLaunch lets a group launch once for the ranks of this process on
	// one GPU (onelaunch.go); EnvOneLaunch sets it.
	OneLaunch bool
	// UntrackedOneRankCopies queues the copy of a one-rank communicator's
	// out-of-place call as NCCL does (ncclLaunchOneRank): a bare
	// device-to-device copy on the caller's stream, one driver call, with
	// no capture check (a capturing stream captures it as a copy node), no
	// ordering after the rank's previous launch on another stream and no
	// completion record, so Wait, Finalize and Destroy do not wait for it.
	// That is safe for the engine: a copy touches only the caller's
	// buffers and runs no kernel, so neither Destroy's frees nor the
	// residency ledger depend on it. The C ABI sets it (C has no Wait, and
	// NCCL's ncclCommFinalize and ncclCommDestroy do not wait for the copy
	// either); the Go API keeps Comm.Wait's promise to wait for
	// everything.
	UntrackedOneRankCopies bool
	// CaptureRecordBeside puts a captured launch's completion record
	// beside the captured stream's chain (EnvCaptureRecord sets it).
	CaptureRecordBeside bool
	// Programmatic chooses which communicators launch their collective
	// kernels as programmatic dependent launches (EnvProgrammatic sets
	// it).
	Programmatic Programmatic
	// TriggerEarly lets a programmatic kernel start the next one once it
	// has waited for those before it (EnvTriggerEarly sets it).
	TriggerEarly bool
	// KernelGraphs chooses whether plain kernel launches go through a
	// launch graph, and multi-rank launches' joins with them
	// (enqueue.Launcher.LaunchGraphs and JoinGraphs; EnvKernelGraph sets
	// it).
	KernelGraphs KernelGraphs
	// OnePass runs a multi-rank launch of every rank of a communicator's
	// small AllReduce in one pass (enqueue.Launcher.OnePassAllReduce;
	// EnvOnePass sets it).
	OnePass bool
}

// Complete fills in what follows from cfg once the caller's options are
// set: the bootstrap's interface and family, and the NCCL_DEBUG logger
// (with its file) unless s.Log is set.
// The log file comes with no reference: each communicator retains it, and
// a caller that ends up with none calls LogFile.CloseUnused.
func (s *Settings) Complete(cfg config.Config) error {
	on, err := oneLaunchFromEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	s.OneLaunch = on
	if s.CaptureRecordBeside, err = captureRecordFromEnv(os.LookupEnv); err != nil {
		return err
	}
	if s.Programmatic, err = programmaticFromEnv(os.LookupEnv); err != nil {
		return err
	}
	if s.TriggerEarly, err = triggerEarlyFromEnv(os.LookupEnv); err != nil {
		return err
	}
	if s.KernelGraphs, err = kernelGraphFromEnv(os.LookupEnv); err != nil {
		return err
	}
	if s.OnePass, err = onePassFromEnv(os.LookupEnv); err != nil {
		return err
	}
	s.Config = cfg
	if cfg.SocketIfname.IsSet() {
		s.Bootstrap.Interface = cfg.SocketIfname.String()
	}
	s.Bootstrap.Family = cfg.SocketFamily
	if s.Log == nil {
		w, err := cfg.OpenDebugFile()
		if err != nil {
			return err
		}
		if w == nil {
			w = nopWriteCloser{os.Stdout}
		}
		s.LogFile = &SharedCloser{c: w}
		s.Log = config.NewLogger(cfg, w)
	}
	s.Bootstrap.Logger = s.Log
	return nil
}

// Timeout is the communicator's timeout, which bounds admission, Destroy
// and the exchanges of Split and Shrink: the bootstrap timeout
// (Options.BootstrapTimeout, else NCCL_BOOTSTRAP_TIMEOUT as runtime/config
// parsed it, else bootstrap.DefaultTimeout).
func (s Settings) Timeout() time.Duration {
	switch {
	case s.Bootstrap.Timeout > 0:
		return s.Bootstrap.Timeout
	case s.Config.BootstrapTimeout > 0:
		return s.Config.BootstrapTimeout
	}
	return bootstrap.DefaultTimeout
}

// FindImage returns the kernel set the settings name and where it came
// from.
func (s Settings) FindImage() ([]byte, string, error) {
	if len(s.ImageBytes) > 0 {
		return kernels.FromBytes(s.ImageBytes)
	}
	return kernels.FindImage(s.Image)
}

// hostID names this host for the ranks' descriptions: NCCL_HOSTID, else
// the host name up to its first dot.
func hostID(cfg config.Config) string {
	if cfg.HostID != "" {
		return cfg.HostID
	}
	h, _ := os.Hostname()
	if i := strings.IndexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	return h
}

// SharedCloser closes a log file when the last communicator using it is
// destroyed, or, when none took it, once the caller is done with it
// (CloseUnused). Its methods accept a nil receiver.
type SharedCloser struct {
	refs atomic.Int64
	c    io.Closer
	once sync.Once
	err  error
}

// Retain counts one more communicator using the file.
func (s *SharedCloser) Retain() *SharedCloser {
	if s != nil {
		s.refs.Add(1)
	}
	return s
}

// Release drops one communicator's use and closes the file after the last.
func (s *SharedCloser) Release() error {
	if s == nil || s.refs.Add(-1) != 0 {
		return nil
	}
	return s.close()
}

// CloseUnused closes the file unless a communicator holds it: for the
// settings of a call that failed before any communicator retained them,
// and for a bootstrap root's, once the root stopped.
func (s *SharedCloser) CloseUnused() error {
	if s == nil || s.refs.Load() > 0 {
		return nil
	}
	return s.close()
}

func (s *SharedCloser) close() error {
	s.once.Do(func() { s.err = s.c.Close() })
	return s.err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
