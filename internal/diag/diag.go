// Package diag exposes diagnostics of ncclgo's internals to the module's
// own tests, so that a hang shows where it sits. It is not an API: package
// runtime/comm fills in Connections when it is initialised, and both may
// change at any time.
package diag

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Conn is one side of one connection of a communicator on one channel,
// with the counters it keeps in device memory as read at one moment.
// A counter is -1 where the side has none or it could not be read.
type Conn struct {
	Rank, Channel, Peer int
	Send                bool   // the sending side, towards Peer; else the receiving side, from Peer
	Via                 string // the transport ("P2P/CUMEM", "SHM"), sending side only
	Step                int64  // this side's step counter
	Tail                int64  // steps the sender has posted (SIMPLE)
	Head                int64  // steps the receiver has consumed
}

// Connections reads the connections of comm, a rank's engine (a
// *comm.Engine of runtime/comm, which sets it), while its kernels may
// still run (the copies do not wait for its streams). It is nil in a
// program that does not link runtime/comm.
var Connections func(comm any) ([]Conn, error)

// Engine turns a public communicator (*ncclgo.Comm, which package ncclgo
// sets it to unwrap) into its engine for Connections; nil, or a value it
// does not know, leaves comm as it is.
var Engine func(comm any) any

// DumpWithin is Dump bounded by wait: reading a connection's counters
// may block behind a hung kernel, and then it says so instead. The read
// that ran out goes on in the background and its result is dropped: its
// goroutine ends when the read does (a hung kernel's memory may keep it
// until the process exits; the callers, a failing test and ncclperf's
// -T, end soon after).
func DumpWithin(comms []any, wait time.Duration) string {
	done := make(chan string, 1)
	go func() { done <- Dump(comms) }()
	select {
	case s := <-done:
		return s
	case <-time.After(wait):
		return fmt.Sprintf("the dump itself did not finish within %v (reading device memory blocked)", wait)
	}
}

// Dump reads the connections of every rank of a communicator (comms[r] is
// rank r's engine) and formats them one line per connection and
// channel: the sender's step, tail and head against the receiver's step.
// On a connection that is idle the sender's and receiver's steps agree;
// a hung group shows where they do not, or where a channel's steps lag
// the others'.
func Dump(comms []any) string {
	if Connections == nil {
		return "connection dump unavailable: package runtime/comm is not linked"
	}
	type key struct{ ch, from, to int }
	recvStep := map[key]int64{}
	var sends []Conn
	var errs []string
	for r, c := range comms {
		if Engine != nil {
			c = Engine(c)
		}
		conns, err := Connections(c)
		if err != nil {
			errs = append(errs, fmt.Sprintf("rank %d: %v", r, err))
			continue
		}
		for _, k := range conns {
			if k.Send {
				sends = append(sends, k)
			} else {
				recvStep[key{k.Channel, k.Peer, k.Rank}] = k.Step
			}
		}
	}
	slices.SortFunc(sends, func(a, b Conn) int {
		if a.Channel != b.Channel {
			return a.Channel - b.Channel
		}
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return a.Peer - b.Peer
	})
	num := func(v int64) string {
		if v < 0 {
			return "?"
		}
		return fmt.Sprint(v)
	}
	lines := errs
	for _, s := range sends {
		k := key{s.Channel, s.Rank, s.Peer}
		rs, ok := recvStep[k]
		delete(recvStep, k)
		if !ok {
			rs = -1
		}
		mark := ""
		if rs >= 0 && s.Step >= 0 && rs != s.Step {
			mark = "  <- steps differ"
		}
		lines = append(lines, fmt.Sprintf("ch%02d %d->%d (%s): sender step %s, tail %s, head %s, receiver step %s%s",
			s.Channel, s.Rank, s.Peer, s.Via, num(s.Step), num(s.Tail), num(s.Head), num(rs), mark))
	}
	// Receivers whose senders are not among comms (another process's).
	var alone []key
	for k := range recvStep {
		alone = append(alone, k)
	}
	slices.SortFunc(alone, func(a, b key) int {
		if a.ch != b.ch {
			return a.ch - b.ch
		}
		if a.to != b.to {
			return a.to - b.to
		}
		return a.from - b.from
	})
	for _, k := range alone {
		lines = append(lines, fmt.Sprintf("ch%02d %d->%d: receiver step %s (the sender is not in this dump)", k.ch, k.from, k.to, num(recvStep[k])))
	}
	if len(lines) == 0 {
		return "no connections"
	}
	return strings.Join(lines, "\n")
}
