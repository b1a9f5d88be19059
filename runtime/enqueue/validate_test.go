package enqueue

import (
	"math"
	"testing"

	"github.com/ncclgo/ncclgo/gen/kspace"
	"github.com/stretchr/testify/require"
)

// TestBuildRejectsBadTasks feeds Build tasks that used to panic (bad type),
// overflow the byte count into a tiny plan (huge counts) or be truncated
// silently (root out of range); each must be an ErrInvalidPlan naming the
// argument, the value and the valid range.
func TestBuildRejectsBadTasks(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 4, NChannels: 4}
	cases := []struct {
		name string
		task Task
		want []string
	}{
		{"bad type", Task{Coll: kspace.AllReduce, Type: 99, Count: 8, Send: 1, Recv: 1}, []string{"data type 99", "want 0..11"}},
		{"negative type", Task{Coll: kspace.Broadcast, Type: -1, Count: 8, Send: 1, Recv: 1}, []string{"data type -1"}},
		{"bad coll", Task{Coll: 42, Type: kspace.F32, Count: 8}, []string{"collective 42", "want one of"}},
		{"bad op", Task{Coll: kspace.AllReduce, Type: kspace.F32, Op: 17, Count: 8, Send: 1, Recv: 1}, []string{"reduction op 17", "want 0..4"}},
		{"count overflows", Task{Coll: kspace.AllReduce, Type: kspace.F64, Count: 1 << 61, Send: 1, Recv: 1}, []string{"count 2305843009213693952", "at most 1152921504606846975"}},
		{"count × nRanks overflows", Task{Coll: kspace.AllGather, Type: kspace.F32, Count: 1 << 62, Send: 1, Recv: 1}, []string{"count 4611686018427387904", "×16 bytes"}},
		{"count max", Task{Coll: kspace.AllReduce, Type: kspace.U8, Count: math.MaxUint64, Send: 1, Recv: 1}, []string{"count 18446744073709551615"}},
		{"root too big", Task{Coll: kspace.Broadcast, Type: kspace.F32, Root: 1 << 32, Count: 8, Send: 1, Recv: 1}, []string{"root 4294967296", "want 0..3"}},
		{"root = nRanks", Task{Coll: kspace.Reduce, Type: kspace.F32, Root: 4, Count: 8, Send: 1, Recv: 1}, []string{"Reduce root 4", "want 0..3"}},
		{"negative root", Task{Coll: kspace.Reduce, Type: kspace.F32, Root: -1, Count: 8, Send: 1, Recv: 1}, []string{"root -1"}},
		{"peer", Task{Coll: kspace.SendRecv, IsSend: true, Peer: 9, Count: 8, Send: 1}, []string{"peer 9", "want 0..3"}},
		{"p2p bytes", Task{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Count: math.MaxUint64, Send: 1}, []string{"count 18446744073709551615 bytes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { _, err = Build(comm, []Task{tc.task}, ring(4), nil) })
			require.ErrorIs(t, err, ErrInvalidPlan)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
	// The largest legal count still plans.
	_, err := Build(comm, []Task{{Coll: kspace.AllReduce, Type: kspace.U8, Count: math.MaxInt64, Send: 1, Recv: 2}}, ring(4), nil)
	require.NoError(t, err)
}
