package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
	"github.com/stretchr/testify/require"
)

// Environment of TestConnectTwoProcesses's child.
const (
	envXprocID     = "NCCLGO_TRANSPORT_TEST_ID"
	envXprocPolicy = "NCCLGO_TRANSPORT_TEST_POLICY" // "p2p" or "shm"
)

// TestConnectTwoProcesses connects rank 0 (here) and rank 1 (this test
// binary, re-executed) over the real bootstrap and the real descriptor
// rendezvous; their fake devices' memory is memfd-backed, so the bytes
// each sender stores through its mapping must reach the receiver in the
// other process.
func TestConnectTwoProcesses(t *testing.T) {
	if os.Getenv(envXprocID) != "" {
		t.Skip("child process")
	}
	for _, pol := range []string{"p2p", "shm"} {
		t.Run(pol, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fds := openFDs(t)
			opts := bootstrap.Options{Timeout: 20 * time.Second, Addr: "127.0.0.1:0"}
			root, id, err := bootstrap.NewRoot(ctx, opts)
			require.NoError(t, err)
			defer root.Close()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestConnectTwoProcessesChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envXprocID+"="+id.String(), envXprocPolicy+"="+pol)
			done := make(chan error, 1)
			var out []byte
			go func() { var err error; out, err = cmd.CombinedOutput(); done <- err }()
			require.NoError(t, xprocRank(ctx, id, 0, pol))
			require.NoError(t, <-done, "child:\n%s", out)
			require.Contains(t, string(out), "XPROC OK", "child:\n%s", out)
			require.NoError(t, root.Wait(ctx))
			require.NoError(t, root.Close())
			require.Equal(t, fds, openFDs(t), "no descriptor left open")
		})
	}
}

// TestConnectTwoProcessesChild is rank 1 of TestConnectTwoProcesses.
func TestConnectTwoProcessesChild(t *testing.T) {
	s := os.Getenv(envXprocID)
	if s == "" {
		t.Skip("only runs as a child of TestConnectTwoProcesses")
	}
	id, err := bootstrap.ParseUniqueID(s)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	require.NoError(t, xprocRank(ctx, id, 1, os.Getenv(envXprocPolicy)))
	fmt.Println("XPROC OK")
}

// xprocRank is one rank of the two-process test: it connects a 2-rank ring
// of 2 channels, stores a pattern through its send connections and checks
// what arrived on its receive connections.
func xprocRank(ctx context.Context, id bootstrap.UniqueID, rank int, pol string) (err error) {
	net, err := bootstrap.Init(ctx, id, rank, 2, bootstrap.Options{Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := net.Close(); err == nil {
			err = cerr
		}
	}()
	me := Peer{PID: os.Getpid(), Host: "h", Device: rank}
	b, _ := json.Marshal(me)
	all, err := net.AllGather(ctx, b)
	if err != nil {
		return err
	}
	peers := make([]Peer, 2)
	for r, raw := range all {
		if err := json.Unmarshal(raw, &peers[r]); err != nil {
			return err
		}
	}
	if peers[0].PID == peers[1].PID {
		return fmt.Errorf("both ranks in pid %d", peers[0].PID)
	}
	policy, via := Policy{}, "P2P/CUMEM"
	if pol == "shm" {
		policy, via = Policy{P2PDisable: true}, "SHM/direct/direct"
	}
	dev := newFakeIPC(rank)
	set, err := Connect(ctx, net, dev, rank, peers, ringEdges(2, 2, rank), sizes, Options{Policy: policy})
	if err != nil {
		return err
	}
	other := 1 - rank
	for ch := range 2 {
		s := set.Send[Key{ch, other}]
		if got := set.Via[Key{ch, other}]; got != via {
			return fmt.Errorf("rank %d channel %d via %q, want %q", rank, ch, got, via)
		}
		last, err := dev.translate(s.Buffs[2]+uint64(sizes[2])-1, 1)
		if err != nil {
			return err
		}
		tail, err := dev.translate(s.Tail, 8)
		if err != nil {
			return err
		}
		last[0], tail[0] = byte(0x10*(rank+1)+ch), byte(0x80+ch)
	}
	if err := net.Barrier(ctx); err != nil {
		return err
	}
	for ch := range 2 {
		rv := set.Recv[Key{ch, other}]
		last, err := dev.translate(rv.Buffs[2]+uint64(sizes[2])-1, 1)
		if err != nil {
			return err
		}
		tail, err := dev.translate(rv.Tail, 8)
		if err != nil {
			return err
		}
		if want := byte(0x10*(other+1) + ch); last[0] != want || tail[0] != byte(0x80+ch) {
			return fmt.Errorf("rank %d channel %d: FIFO byte %#x and tail %#x from rank %d, want %#x and %#x",
				rank, ch, last[0], tail[0], other, want, 0x80+ch)
		}
	}
	if err := net.Barrier(ctx); err != nil {
		return err
	}
	if err := set.Close(); err != nil {
		return err
	}
	if n := dev.liveCount(); n != 0 {
		return fmt.Errorf("rank %d: %d resources left after Close", rank, n)
	}
	return nil
}
