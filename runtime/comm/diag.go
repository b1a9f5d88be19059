package comm

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/config"
	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// logChannelZero says (NCCL_DEBUG=INFO, subsystem P2P) where channel 0's
// connections keep their LL FIFOs and step counters: the device addresses
// a small call's kernels poll, for relating a run's latency to where its
// lines landed (docs/notes/20261202-session17.md).
func logChannelZero(log *slog.Logger, set *transport.Set) {
	if log == nil || set == nil {
		return
	}
	byPeer := func(a, b transport.Key) int { return cmp.Compare(a.Peer, b.Peer) }
	for _, side := range []struct {
		name  string
		conns map[transport.Key]generated.ConnInfo
	}{{"send to", set.Send}, {"recv from", set.Recv}} {
		for _, k := range slices.SortedFunc(maps.Keys(side.conns), byPeer) {
			if k.Channel != 0 {
				continue
			}
			ci := side.conns[k]
			log.Info(fmt.Sprintf("channel 0 %s rank %d: LL FIFO %#x, step %#x, head %#x", side.name, k.Peer, ci.Buffs[0], ci.Step, ci.Head),
				config.SubsysP2P.Attr())
		}
	}
}

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
