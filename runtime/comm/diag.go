package comm

import (
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// The module's tests read a rank's connection counters through
// internal/diag when a group does not complete; nothing else uses this.
func init() { diag.Connections = debugConnections }

// debugConnections reads the counters of every connection of comm (an
// *Engine) with device-to-host copies that do not wait for its streams.
func debugConnections(comm any) ([]diag.Conn, error) {
	c, ok := comm.(*Engine)
	if !ok || c == nil {
		return nil, fmt.Errorf("ncclgo: diag: %T %v is not a communicator", comm, comm)
	}
	c.mu.Lock()
	set, destroyed := c.conns, c.destroyed
	c.mu.Unlock()
	if destroyed || set == nil {
		return nil, fmt.Errorf("ncclgo: diag: rank %d has no connections (destroyed: %v)", c.rank, destroyed)
	}
	read := func(p uint64) int64 {
		var v uint64
		if p == 0 || c.cctx.MemcpyDtoH(unsafe.Pointer(&v), cuda.DevicePtr(p), 8) != nil {
			return -1
		}
		return int64(v)
	}
	side := func(send bool, ch, peer int, ci generated.ConnInfo) diag.Conn {
		return diag.Conn{Rank: c.rank, Channel: ch, Peer: peer, Send: send,
			Step: read(ci.Step), Tail: read(ci.Tail), Head: read(ci.Head)}
	}
	var out []diag.Conn
	for k, ci := range set.Send {
		d := side(true, k.Channel, k.Peer, ci)
		d.Via = set.Via[k]
		out = append(out, d)
	}
	for k, ci := range set.Recv {
		out = append(out, side(false, k.Channel, k.Peer, ci))
	}
	return out, nil
}
