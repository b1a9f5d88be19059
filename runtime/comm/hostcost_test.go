package comm

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/benchguard"
)

// TestHostCost fails when the host path of a group of ranks' 8-byte
// AllReduce on one GPU (benchMultiHost: each rank's plan, the merge, the
// multi-rank arguments, the joins' bookkeeping) regresses past twice its
// committed baseline, or allocates more (internal/benchguard).
func TestHostCost(t *testing.T) {
	benchguard.Check(t, "comm/MultiAllReduce2", func(b *testing.B) { benchMultiHost(b, 2) })
	benchguard.Check(t, "comm/MultiAllReduce8", func(b *testing.B) { benchMultiHost(b, 8) })
}
