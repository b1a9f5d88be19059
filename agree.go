package ncclgo

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// agreeResidency returns the SM count and the resident blocks per SM that
// every rank's tuner uses: the smallest over the ranks, exchanged through
// net. The channel count, the rings and each call's channel split must be
// identical on every rank, and they derive from these two numbers; a rank
// that took its own GPU's (a different model, a MIG slice, a different
// occupancy) would set up other channels than its peers and their
// connections would never match.
func agreeResidency(ctx context.Context, net bootstrap.Network, smCount, blocksPerSM int) (int, int, error) {
	mine := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(smCount)), uint64(blocksPerSM))
	all, err := net.AllGather(ctx, mine)
	if err != nil {
		return 0, 0, fmt.Errorf("exchanging SM counts: %w", err)
	}
	for r, b := range all {
		if len(b) != 16 {
			return 0, 0, fmt.Errorf("rank %d's SM count: %d bytes, want 16", r, len(b))
		}
		smCount = min(smCount, int(binary.LittleEndian.Uint64(b)))
		blocksPerSM = min(blocksPerSM, int(binary.LittleEndian.Uint64(b[8:])))
	}
	return smCount, blocksPerSM, nil
}
