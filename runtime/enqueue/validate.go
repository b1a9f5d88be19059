package enqueue

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ncclgo/ncclgo/kspace"
)

// MaxBytes bounds the bytes one task moves (for AllGather and
// ReduceScatter, the whole buffer of all ranks): the plan's byte counts are
// int64.
const MaxBytes = math.MaxInt64

// validate checks every task of a rank before Build plans anything, so that
// a bad task is an error naming the argument, its value and what is valid
// rather than a panic, an overflowed byte count or a truncated root.
func validate(c Comm, tasks []Task) error {
	for i, t := range tasks {
		if err := validateTask(c, t); err != nil {
			return fmt.Errorf("enqueue: %w: task %d: %v", ErrInvalidPlan, i, err)
		}
	}
	return nil
}

func validateTask(c Comm, t Task) error {
	if t.Coll < 0 || t.Coll >= kspace.NumColls || t.Coll == kspace.AllGatherV {
		return fmt.Errorf("collective %d: want one of Broadcast (%d), Reduce (%d), AllGather (%d), ReduceScatter (%d), AllReduce (%d), SendRecv (%d)",
			int(t.Coll), kspace.Broadcast, kspace.Reduce, kspace.AllGather, kspace.ReduceScatter, kspace.AllReduce, kspace.SendRecv)
	}
	if t.Coll == kspace.SendRecv && (t.Peer < 0 || t.Peer >= c.NRanks) {
		return fmt.Errorf("%s peer %d: want 0..%d", t.Coll, t.Peer, c.NRanks-1)
	}
	if t.Type < 0 || t.Type >= kspace.NumTypes {
		return fmt.Errorf("%s data type %d: want 0..%d", t.Coll, int(t.Type), kspace.NumTypes-1)
	}
	if es := uint64(t.Type.Size()); t.Bytes%es != 0 {
		return fmt.Errorf("%s bytes %d: want a multiple of %d, the size of one %s element", t.Coll, t.Bytes, es, t.Type)
	}
	if t.Coll.HasRedOp() && (t.Op < 0 || t.Op >= kspace.NumRedOps) {
		return fmt.Errorf("%s reduction op %d: want 0..%d", t.Coll, int(t.Op), kspace.NumRedOps-1)
	}
	if (t.Coll == kspace.Broadcast || t.Coll == kspace.Reduce) && (t.Root < 0 || t.Root >= c.NRanks) {
		return fmt.Errorf("%s root %d: want 0..%d", t.Coll, t.Root, c.NRanks-1)
	}
	// The whole buffer the tuner sizes (bufferBytes): Bytes, × nRanks for
	// AllGather and ReduceScatter, whose Bytes is one rank's chunk
	// (kspace.Coll.Blocks).
	if blocks := max(t.Coll.Blocks(c.NRanks)); blocks > 1 {
		hi, lo := bits.Mul64(t.Bytes, uint64(blocks))
		if hi != 0 || lo > MaxBytes {
			return fmt.Errorf("%s bytes %d per rank (× %d ranks): the buffer exceeds %d bytes; want at most %d bytes per rank",
				t.Coll, t.Bytes, c.NRanks, uint64(MaxBytes), uint64(MaxBytes)/uint64(c.NRanks))
		}
	} else if t.Bytes > MaxBytes {
		return fmt.Errorf("%s bytes %d: want at most %d", t.Coll, t.Bytes, uint64(MaxBytes))
	}
	return nil
}
