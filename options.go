package ncclgo

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ncclgo/ncclgo/runtime/comm"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Options configure a communicator. A nil *Options, and every field left
// at its zero value, take the environment (NCCL_* variables) or the
// defaults; fields that are set override the environment.
type Options struct {
	// Overrides replaces NCCL_* settings (NCCL_ALGO, NCCL_PROTO,
	// NCCL_NCHANNELS, NCCL_BUFFSIZE, NCCL_DEBUG, ...): every non-nil field
	// wins over the environment.
	config.Overrides
	// BootstrapTimeout bounds every wait of the bootstrap network (zero:
	// NCCL_BOOTSTRAP_TIMEOUT, else 120 s).
	BootstrapTimeout time.Duration
	// Logger receives the communicator's logs instead of the NCCL_DEBUG
	// logger (NCCL's line format on standard output or NCCL_DEBUG_FILE).
	// NCCL_DEBUG and NCCL_DEBUG_SUBSYS still filter what it gets only when
	// it is nil.
	Logger *slog.Logger
	// KernelImage is the path of the kernel set (the file `ncclgen build`
	// writes); empty searches $NCCLGO_FATBIN, the embedded image and
	// build/ncclgo.fatbin.
	KernelImage string
	// KernelImageBytes is the kernel set itself, for a program that
	// embeds it:
	//
	//	//go:generate go run github.com/ncclgo/ncclgo/cmd/ncclgen build --only "AllReduce Sum f32 * *" --out kernels.fatbin
	//	//go:embed kernels.fatbin
	//	var kernelSet []byte
	//
	// When not empty it wins over KernelImage and the search. Any kernel
	// set of this ncclgo's ABI version runs: a call that needs a function
	// the set's filter left out fails, naming the function and the filter.
	KernelImageBytes []byte
	// P2PChannelsPerPeer is the number of channels the traffic between two
	// ranks spreads over. 0 gives each pair what its path supports, as
	// NCCL does: every channel for ranks on one GPU or on NVLink (two per
	// NVLink), 2 over PCIe, NCCL_NCHANNELS_PER_NET_PEER (2) between hosts,
	// the smallest of these over the communicator's pairs, and at most
	// NCCL_MAX_P2P_NCHANNELS.
	P2PChannelsPerPeer int
	// Contexts names, per device ordinal, the CUDA context a rank on that
	// device runs in — a context the caller created or one a cudart-based
	// library uses (cuda.WrapContext, cuda.CurrentContext). Devices not in
	// the map use their primary context, as cudart does. The caller keeps
	// owning the contexts; they must outlive the communicators, and the
	// streams passed to a communicator must belong to its context.
	Contexts map[int]*cuda.Context
	// UntrackedOneRankCopies makes a one-rank communicator queue the copy
	// of an out-of-place call as NCCL does: a bare device-to-device copy
	// on the caller's stream and nothing more (no CUDA graph capture
	// check, no ordering after its previous launch on another stream, no
	// completion event), which costs one driver call instead of four, and
	// the host no planning and no allocation (as an in-place one is
	// nothing at all).
	// Wait, Finalize and Destroy then do not wait for those copies: the
	// caller synchronizes its stream. A copy on a capturing stream is
	// captured as a copy node all the same. The C ABI (libnccl.so.2) sets
	// it, as NCCL's ncclCommFinalize and ncclCommDestroy do not wait for
	// a one-rank copy either.
	UntrackedOneRankCopies bool
}

// resolve reads the environment and applies o. The log file, if any, is
// returned with no reference; each communicator retains it, and a caller
// that ends up with none calls CloseUnused.
func (o *Options) resolve() (comm.Settings, error) {
	var s comm.Settings
	cfg, err := config.Load()
	if err != nil {
		return s, err
	}
	if o != nil {
		if cfg, err = cfg.Apply(o.Overrides); err != nil {
			return s, err
		}
		s.Bootstrap.Timeout = o.BootstrapTimeout
		s.Image = o.KernelImage
		s.ImageBytes = o.KernelImageBytes
		s.P2PPerPeer = o.P2PChannelsPerPeer
		if o.P2PChannelsPerPeer < 0 {
			return s, &ArgError{Arg: "Options.P2PChannelsPerPeer", Value: o.P2PChannelsPerPeer, Want: "0 (default) or a positive channel count"}
		}
		s.Log = o.Logger
		for d, cx := range o.Contexts {
			if cx == nil || cx.Handle() == 0 {
				return s, &ArgError{Arg: fmt.Sprintf("Options.Contexts[%d]", d), Value: "nil", Want: "a live context from cuda.WrapContext or cuda.CurrentContext"}
			}
			if int(cx.Device()) != d {
				return s, &ArgError{Arg: fmt.Sprintf("Options.Contexts[%d]", d), Value: fmt.Sprintf("a context of device %d", int(cx.Device())), Want: fmt.Sprintf("a context of device %d", d)}
			}
		}
		s.Contexts = o.Contexts
		s.UntrackedOneRankCopies = o.UntrackedOneRankCopies
	}
	return s, s.Complete(cfg)
}
