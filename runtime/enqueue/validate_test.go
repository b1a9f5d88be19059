package enqueue

import (
	"math"
	"testing"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/stretchr/testify/require"
)

// TestBuildRejectsBadTasks feeds Build tasks that used to panic (bad type),
// overflow the byte count into a tiny plan (huge sizes), hold a part of an
// element or be truncated silently (root out of range); each must be an
// ErrInvalidPlan naming the argument, the value and the valid range.
func TestBuildRejectsBadTasks(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 4, NChannels: 4}
	cases := []struct {
		name string
		task Task
		want []string
	}{
		{"bad type", Task{Coll: kspace.AllReduce, Type: 99, Bytes: 8, Send: 1, Recv: 1}, []string{"data type 99", "want 0..11"}},
		{"negative type", Task{Coll: kspace.Broadcast, Type: -1, Bytes: 8, Send: 1, Recv: 1}, []string{"data type -1"}},
		{"p2p type", Task{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Type: 12, Bytes: 8, Send: 1}, []string{"SendRecv data type 12", "want 0..11"}},
		{"bad coll", Task{Coll: 42, Type: kspace.F32, Bytes: 8}, []string{"collective 42", "want one of"}},
		{"bad op", Task{Coll: kspace.AllReduce, Type: kspace.F32, Op: 17, Bytes: 8, Send: 1, Recv: 1}, []string{"reduction op 17", "want 0..4"}},
		{"partial element", Task{Coll: kspace.AllReduce, Type: kspace.F32, Bytes: 6, Send: 1, Recv: 1}, []string{"AllReduce bytes 6", "want a multiple of 4", "f32"}},
		{"partial p2p element", Task{Coll: kspace.SendRecv, Peer: 2, Type: kspace.F64, Bytes: 12, Recv: 1}, []string{"SendRecv bytes 12", "want a multiple of 8"}},
		{"bytes overflow", Task{Coll: kspace.AllReduce, Type: kspace.F64, Bytes: 1 << 63, Send: 1, Recv: 1}, []string{"bytes 9223372036854775808", "want at most 9223372036854775807"}},
		{"bytes × nRanks overflow", Task{Coll: kspace.AllGather, Type: kspace.F32, Bytes: 1 << 62, Send: 1, Recv: 1}, []string{"bytes 4611686018427387904 per rank", "× 4 ranks", "want at most 2305843009213693951 bytes per rank"}},
		{"bytes × nRanks wraps", Task{Coll: kspace.ReduceScatter, Type: kspace.U8, Bytes: 1<<62 + 1<<63, Send: 1, Recv: 1}, []string{"bytes 13835058055282163712 per rank"}},
		{"bytes max", Task{Coll: kspace.AllReduce, Type: kspace.U8, Bytes: math.MaxUint64, Send: 1, Recv: 1}, []string{"bytes 18446744073709551615"}},
		{"root too big", Task{Coll: kspace.Broadcast, Type: kspace.F32, Root: 1 << 32, Bytes: 8, Send: 1, Recv: 1}, []string{"root 4294967296", "want 0..3"}},
		{"root = nRanks", Task{Coll: kspace.Reduce, Type: kspace.F32, Root: 4, Bytes: 8, Send: 1, Recv: 1}, []string{"Reduce root 4", "want 0..3"}},
		{"negative root", Task{Coll: kspace.Reduce, Type: kspace.F32, Root: -1, Bytes: 8, Send: 1, Recv: 1}, []string{"root -1"}},
		{"peer", Task{Coll: kspace.SendRecv, IsSend: true, Peer: 9, Bytes: 8, Send: 1}, []string{"peer 9", "want 0..3"}},
		{"p2p bytes", Task{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Bytes: math.MaxUint64, Send: 1}, []string{"SendRecv bytes 18446744073709551615", "want at most 9223372036854775807"}},
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
	// The largest legal sizes still plan.
	for _, task := range []Task{
		{Coll: kspace.AllReduce, Type: kspace.U8, Bytes: math.MaxInt64, Send: 1, Recv: 2},
		{Coll: kspace.AllReduce, Type: kspace.F64, Bytes: math.MaxInt64 &^ 7, Send: 1, Recv: 2},
		{Coll: kspace.AllGather, Type: kspace.U8, Bytes: math.MaxInt64 / 4, Send: 1, Recv: 2},
		{Coll: kspace.SendRecv, Type: kspace.F32, Bytes: math.MaxInt64 &^ 3, Peer: 1, IsSend: true, Send: 1},
	} {
		_, err := Build(comm, []Task{task}, ring(4), nil)
		require.NoError(t, err, "%+v", task)
	}
}

// A nil Chooser is a bad argument, not a panic.
func TestBuildNilChooser(t *testing.T) {
	comm := Comm{Rank: 0, NRanks: 4, NChannels: 4}
	for _, task := range []Task{
		{Coll: kspace.AllReduce, Type: kspace.F32, Bytes: 8, Send: 1, Recv: 1},
		{Coll: kspace.SendRecv, IsSend: true, Peer: 1, Bytes: 8, Send: 1},
	} {
		var err error
		require.NotPanics(t, func() { _, err = Build(comm, []Task{task}, nil, nil) })
		require.ErrorIs(t, err, ErrInvalidPlan)
		require.ErrorContains(t, err, "nil Chooser")
	}
}
