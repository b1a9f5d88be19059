package diag

import (
	"errors"
	"strings"
	"testing"
	"time"

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

// TestDumpWithin: a dump whose reads block says so after the wait
// instead of blocking its caller; one that finishes is Dump's text.
func TestDumpWithin(t *testing.T) {
	saved := Connections
	t.Cleanup(func() { Connections = saved })
	release := make(chan struct{})
	Connections = func(any) ([]Conn, error) {
		<-release
		return nil, nil
	}
	start := time.Now()
	got := DumpWithin([]any{1}, 20*time.Millisecond)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, "the dump itself did not finish within 20ms (reading device memory blocked)", got)
	close(release) // the background read ends

	Connections = func(any) ([]Conn, error) { return nil, nil }
	assert.Equal(t, Dump([]any{1}), DumpWithin([]any{1}, time.Minute))
}
