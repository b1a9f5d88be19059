// Package transport sets up the connections between the ranks of a
// communicator. Only the p2p transport exists so far: ranks of one process,
// on one GPU or on GPUs with peer access, reach each other's device memory
// directly.
//
// Every connection is one direction (From sends to To) on one channel. The
// receiver allocates, on its own device, the per-protocol FIFOs (LL, LL128,
// SIMPLE), the head and tail counters, its step word and the two
// ptrExchange slots, all zeroed; the sender allocates its own step word.
// The ranks exchange the receivers' addresses through the bootstrap network
// (one AllGather), and each side fills its generated.ConnInfo.
package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// Memory is the device memory of one rank (*cuda.Context implements it).
type Memory interface {
	MemAlloc(n uint64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	MemsetD8(p cuda.DevicePtr, v byte, n uint64) error
}

// Sizes are the FIFO sizes in bytes, per protocol (LL, LL128, SIMPLE).
type Sizes [3]uint32

// Validate checks the sizes against the device library's requirements
// (devicesrc/ng_prims.h): every FIFO splits into generated.Steps slots of
// whole lines; SIMPLE a multiple of 1024 bytes, LL of 1024, LL128 of 2048.
func (s Sizes) Validate() error {
	names := [3]string{"LL", "LL128", "SIMPLE"}
	mult := [3]uint32{1024, 2048, 1024}
	for p, n := range s {
		if n == 0 || n%mult[p] != 0 {
			return fmt.Errorf("transport: %s buffer of %d bytes: want a positive multiple of %d", names[p], n, mult[p])
		}
	}
	return nil
}

// Edge is one direction of a connection on one channel.
type Edge struct{ Channel, From, To int }

func (e Edge) String() string { return fmt.Sprintf("ch%d %d->%d", e.Channel, e.From, e.To) }

// Peer identifies where a rank runs.
type Peer struct {
	PID    int
	Host   string
	Device int
}

// Key names one side of a connection from one rank's point of view.
type Key struct{ Channel, Peer int }

// Layout of a receiver's control block.
const (
	offHead        = 0
	offTail        = 64
	offRecvStep    = 128
	offPtrExchange = 192
	ctrlBytes      = 256
	fifoAlign      = 4096
)

func roundUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// record is what a receiver publishes about one connection.
type record struct {
	Channel, From, To int32
	Flags             uint32
	Buffs             [3]uint64
	Head, Tail        uint64
	RecvStep          uint64
	PtrExchange       uint64
	Sizes             [3]uint32
	Pad               uint32
}

// Set is one rank's connections. Send[k] is the ConnInfo of the sending
// side towards peer k.Peer on channel k.Channel, Recv[k] that of the
// receiving side from k.Peer.
type Set struct {
	Send map[Key]generated.ConnInfo
	Recv map[Key]generated.ConnInfo

	mem    Memory
	allocs []cuda.DevicePtr
	bytes  uint64
}

// Bytes is the device memory the set holds.
func (s *Set) Bytes() uint64 { return s.bytes }

// ErrCrossProcess is returned for a connection to a rank in another
// process or on another host: only the in-process p2p transport exists.
var ErrCrossProcess = errors.New("connections between processes are not supported yet (only ranks of one process can connect)")

// Connect sets up the connections of rank me. peers describes every rank;
// edges lists every connection that rank me takes part in (From == me or
// To == me); every rank calls Connect at the same time, with edge lists
// that agree (an edge me->p here must be p's edge me->p). canAccess
// reports whether rank me's device can load and store the memory of
// device d (true for its own device).
func Connect(ctx context.Context, net bootstrap.Network, mem Memory, me int, peers []Peer, edges []Edge, sizes Sizes,
	canAccess func(dev int) bool) (_ *Set, err error) {
	if err := sizes.Validate(); err != nil {
		return nil, err
	}
	if len(peers) != net.Size() {
		return nil, fmt.Errorf("transport: %d peer descriptions for %d ranks", len(peers), net.Size())
	}
	set := &Set{Send: map[Key]generated.ConnInfo{}, Recv: map[Key]generated.ConnInfo{}, mem: mem}
	defer func() {
		if err != nil {
			_ = set.Close()
		}
	}()
	self := peers[me]
	flagsWith := func(p int) (uint32, error) {
		q := peers[p]
		if q.PID != self.PID || q.Host != self.Host {
			return 0, fmt.Errorf("transport: rank %d (pid %d on %q) and rank %d (pid %d on %q): %w",
				me, self.PID, self.Host, p, q.PID, q.Host, ErrCrossProcess)
		}
		var f uint32
		if q.Device == self.Device {
			f |= generated.ConnSameGpu | generated.ConnDirect
		} else if canAccess != nil && canAccess(q.Device) {
			f |= generated.ConnDirect
		} else {
			return 0, fmt.Errorf("transport: rank %d (device %d) cannot access rank %d's device %d (no peer access); "+
				"connections through host memory are not supported yet", me, self.Device, p, q.Device)
		}
		return f, nil
	}
	var fifo [3]uint64
	total := uint64(ctrlBytes)
	total = roundUp(total, fifoAlign)
	for p, n := range sizes {
		fifo[p] = total
		total = roundUp(total+uint64(n), fifoAlign)
	}
	edges = slices.Clone(edges)
	slices.SortFunc(edges, func(a, b Edge) int {
		return slices.Compare([]int{a.Channel, a.From, a.To}, []int{b.Channel, b.From, b.To})
	})
	edges = slices.Compact(edges)
	var mine []record
	nSend := 0
	for _, e := range edges {
		switch {
		case e.From == e.To:
			return nil, fmt.Errorf("transport: edge %v connects rank %d to itself", e, e.From)
		case e.To == me:
			f, err := flagsWith(e.From)
			if err != nil {
				return nil, err
			}
			base, err := set.alloc(total)
			if err != nil {
				return nil, fmt.Errorf("transport: connection %v: %w", e, err)
			}
			r := record{Channel: int32(e.Channel), From: int32(e.From), To: int32(e.To), Flags: f,
				Head: base + offHead, Tail: base + offTail, RecvStep: base + offRecvStep, PtrExchange: base + offPtrExchange, Sizes: sizes}
			for p := range fifo {
				r.Buffs[p] = base + fifo[p]
			}
			mine = append(mine, r)
		case e.From == me:
			if _, err := flagsWith(e.To); err != nil {
				return nil, err
			}
			nSend++
		default:
			return nil, fmt.Errorf("transport: edge %v does not involve rank %d", e, me)
		}
	}
	// The senders' step words, one 64-byte line each.
	var sendSteps uint64
	if nSend > 0 {
		if sendSteps, err = set.alloc(uint64(nSend) * 64); err != nil {
			return nil, fmt.Errorf("transport: send step words: %w", err)
		}
	}
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, mine); err != nil {
		return nil, fmt.Errorf("transport: encoding: %w", err)
	}
	all, err := net.AllGather(ctx, buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("transport: exchanging connection addresses: %w", err)
	}
	recvOf := map[Edge]record{}
	for rank, b := range all {
		recs := make([]record, len(b)/binary.Size(record{}))
		if len(b)%binary.Size(record{}) != 0 {
			return nil, fmt.Errorf("transport: rank %d sent %d bytes of connection records, not a multiple of %d", rank, len(b), binary.Size(record{}))
		}
		if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, recs); err != nil {
			return nil, fmt.Errorf("transport: decoding rank %d's records: %w", rank, err)
		}
		for _, r := range recs {
			if int(r.To) != rank {
				return nil, fmt.Errorf("transport: rank %d published a connection to rank %d", rank, r.To)
			}
			recvOf[Edge{Channel: int(r.Channel), From: int(r.From), To: int(r.To)}] = r
		}
	}
	conn := func(r record, step uint64) generated.ConnInfo {
		return generated.ConnInfo{Buffs: r.Buffs, Head: r.Head, Tail: r.Tail, Step: step, PtrExchange: r.PtrExchange,
			BuffSizes: r.Sizes, Flags: r.Flags}
	}
	si := 0
	for _, e := range edges {
		r, ok := recvOf[e]
		if !ok {
			return nil, fmt.Errorf("transport: connection %v: rank %d did not set it up (the ranks disagree on the channels' graphs)", e, e.To)
		}
		if e.To == me {
			set.Recv[Key{e.Channel, e.From}] = conn(r, r.RecvStep)
		} else {
			f, _ := flagsWith(e.To)
			c := conn(r, sendSteps+uint64(si)*64)
			c.Flags = f
			set.Send[Key{e.Channel, e.To}] = c
			si++
		}
	}
	return set, nil
}

// alloc allocates n zeroed bytes.
func (s *Set) alloc(n uint64) (uint64, error) {
	p, err := s.mem.MemAlloc(n)
	if err != nil {
		return 0, err
	}
	s.allocs = append(s.allocs, p)
	s.bytes += n
	if err := s.mem.MemsetD8(p, 0, n); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

// Close frees the set's memory. The kernels that use it must be done.
func (s *Set) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, p := range s.allocs {
		errs = append(errs, s.mem.MemFree(p))
	}
	s.allocs = nil
	s.bytes = 0
	return errors.Join(errs...)
}
