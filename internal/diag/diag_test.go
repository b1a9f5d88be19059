package diag

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// fake is a communicator of the test: its rank and connections.
type fake struct {
	rank  int
	conns []Conn
}

func TestDump(t *testing.T) {
	saved := Connections
	defer func() { Connections = saved }()
	Connections = nil
	assert.Contains(t, Dump([]any{1}), "unavailable")
	Connections = func(c any) ([]Conn, error) {
		f, ok := c.(fake)
		if !ok {
			return nil, errors.New("not a fake")
		}
		return f.conns, nil
	}
	// Ring 0 -> 1 -> 0 on channel 0; 1 -> 0 is stuck: the sender posted
	// step 8, the receiver consumed 6. Rank 2 (another process) sends to
	// rank 1 on channel 1.
	r0 := fake{0, []Conn{
		{Rank: 0, Channel: 0, Peer: 1, Send: true, Via: "P2P/CUMEM", Step: 4, Tail: 4, Head: 4},
		{Rank: 0, Channel: 0, Peer: 1, Step: 6, Tail: -1, Head: 6},
	}}
	r1 := fake{1, []Conn{
		{Rank: 1, Channel: 0, Peer: 0, Send: true, Via: "SHM", Step: 8, Tail: 8, Head: 6},
		{Rank: 1, Channel: 0, Peer: 0, Step: 4, Tail: 4, Head: 4},
		{Rank: 1, Channel: 1, Peer: 2, Step: 2, Tail: 2, Head: 2},
	}}
	got := Dump([]any{r0, r1, "x"})
	lines := strings.Split(got, "\n")
	assert.Equal(t, []string{
		"rank 2: not a fake",
		"ch00 0->1 (P2P/CUMEM): sender step 4, tail 4, head 4, receiver step 4",
		"ch00 1->0 (SHM): sender step 8, tail 8, head 6, receiver step 6  <- steps differ",
		"ch01 2->1: receiver step 2 (the sender is not in this dump)",
	}, lines)
	assert.Equal(t, "no connections", Dump(nil))
}
