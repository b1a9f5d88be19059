package transport

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUConnectPosingAsProcesses connects two ranks of this process on
// device 0 that claim different process ids, so that the real driver runs
// the cross-process paths (VMM export and import through the descriptor
// server; shared memory registered twice), and checks that bytes written
// through the sender's mapping are read back through the receiver's.
// Legacy IPC handles cannot be opened by their own process and are left to
// the multi-process suite (tests/multiprocess_test.go).
func TestGPUConnectPosingAsProcesses(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skip("no CUDA driver: " + err.Error())
	}
	dev, err := cuda.GetDevice(0)
	require.NoError(t, err)
	ctx, err := dev.PrimaryContext()
	require.NoError(t, err)
	defer ctx.Release()
	for _, c := range []struct {
		name string
		pol  Policy
		via  string
	}{
		{"P2P/CUMEM", Policy{}, "P2P/CUMEM"},
		{"SHM", Policy{P2PDisable: true}, "SHM/direct/direct"},
	} {
		t.Run(c.name, func(t *testing.T) {
			peers := []Peer{{PID: 1, Host: "h", Device: 0}, {PID: 2, Host: "h", Device: 0}}
			nets := bootstrap.NewInProcess(2)
			sets := make([]*Set, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					sets[r], errs[r] = Connect(context.Background(), nets[r], ctx, r, peers, ringEdges(2, 2, r), sizes, Options{Policy: c.pol})
					if errs[r] != nil {
						nets[r].Abort()
					}
				})
			}
			wg.Wait()
			for r := range 2 {
				require.NoError(t, nets[r].Close())
				require.NoError(t, errs[r], "rank %d", r)
				defer func() { assert.NoError(t, sets[r].Close()) }()
			}
			for ch := range 2 {
				s, rv := sets[0].Send[Key{ch, 1}], sets[1].Recv[Key{ch, 0}]
				assert.Equal(t, c.via, sets[0].Via[Key{ch, 1}])
				assert.NotEqual(t, s.Buffs[2], rv.Buffs[2], "two mappings of one buffer")
				in := bytes.Repeat([]byte{byte(0x40 + ch)}, 4096)
				require.NoError(t, ctx.MemcpyHtoD(cuda.DevicePtr(s.Buffs[2]), unsafe.Pointer(&in[0]), 4096))
				out := make([]byte, 4096)
				require.NoError(t, ctx.MemcpyDtoH(unsafe.Pointer(&out[0]), cuda.DevicePtr(rv.Buffs[2]), 4096))
				assert.Equal(t, in, out, "channel %d: the receiver reads what the sender wrote", ch)
				// The control words start zeroed.
				head := make([]byte, 8)
				require.NoError(t, ctx.MemcpyDtoH(unsafe.Pointer(&head[0]), cuda.DevicePtr(s.Head), 8))
				assert.Equal(t, make([]byte, 8), head)
			}
		})
	}
}
