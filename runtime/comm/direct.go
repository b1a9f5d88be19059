package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/topo"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// DIRECT (kspace.Direct, devicesrc/direct.h) lets every rank load its
// peers' user buffers. It runs where that works with plain device
// pointers: every rank of the communicator is in this process, and every
// pair of ranks is on one GPU or on two GPUs with peer access (enabled by
// enablePeers), with NCCL_P2P_DISABLE unset when there are several GPUs.
// Ranks of other processes (MPS, IPC) would need every call's user buffers
// exported and mapped, which a kernel cannot do: DIRECT is off there.
//
// Each rank allocates its mailboxes (one generated.DirectSlot per channel
// and the LL one-shot's line buffers, zeroed: see directSlotsBytes) in its
// own device memory; the ranks exchange their addresses
// over the bootstrap network, and each rank's device image lists them
// (DevComm.Direct). A rank writes only its own slots. Its slots are freed
// with its other device memory at Destroy, once its kernels are done;
// cuMemFree waits for the device's kernels, so a peer's kernel on the same
// GPU that still polls them finishes first.

// directEligible reports whether DIRECT can run on the ranks described by
// peers (the ranks' processes and devices) and l (their GPUs' peer access).
func directEligible(peers []transport.Peer, l topo.Layout, p2pDisable bool) bool {
	n := len(peers)
	if n < 2 || n > generated.DirectMaxRanks {
		return false
	}
	for r := 1; r < n; r++ {
		if !peers[r].SameProcess(peers[0]) || peers[r].Host != peers[0].Host {
			return false
		}
	}
	if l.NGPUs > 1 {
		if p2pDisable {
			return false
		}
		for i := range l.NGPUs {
			for j := range l.NGPUs {
				if k := l.LinkBetween(i, j); k != topo.LinkSame && k != topo.LinkPeer {
					return false
				}
			}
		}
	}
	return true
}

// directSlotsBytes is the size of one rank's mailboxes, zeroed at setup: a
// slot for every channel a kernel can serve, then per channel the LL
// one-shot's two buffers (by call parity) of generated.DirectLlBytes/8
// 16-byte lines each (directLLChannelBytes), where devicesrc/direct.h finds them.
// About 1 MiB per rank (64 × (128 B + 16 KiB)).
const directSlotsBytes = uint64(generated.MaxChannels) * (uint64(unsafe.Sizeof(generated.DirectSlot{})) + directLLChannelBytes)

// directLLChannelBytes is one channel's LL area: two buffers of
// generated.DirectLlBytes/8 lines of 16 bytes (8 data bytes and two flags).
const directLLChannelBytes = 2 * generated.DirectLlBytes / 8 * 16

// exchangeDirect publishes this rank's mailboxes at addr and returns every
// rank's, by rank.
func exchangeDirect(ctx context.Context, net bootstrap.Network, addr uint64) ([]uint64, error) {
	all, err := net.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, addr))
	if err != nil {
		return nil, fmt.Errorf("exchanging the DIRECT mailboxes: %w", err)
	}
	table := make([]uint64, len(all))
	for r, b := range all {
		if len(b) != 8 {
			return nil, fmt.Errorf("rank %d's DIRECT mailboxes: %d bytes, want 8", r, len(b))
		}
		table[r] = binary.LittleEndian.Uint64(b)
		if table[r] == 0 {
			return nil, fmt.Errorf("rank %d's DIRECT mailboxes: null address", r)
		}
	}
	return table, nil
}

// directFlags are the DevComm.DirectFlags of a layout.
func directFlags(l topo.Layout) uint32 {
	if l.NGPUs == 1 {
		return generated.DirectSameGpu
	}
	return 0
}
