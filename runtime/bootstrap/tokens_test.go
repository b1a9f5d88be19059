package bootstrap

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTokens asserts that every token c holds is its rank's real one.
func checkTokens(t *testing.T, c *Conn, conns []*Conn) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, tok := range c.tokens {
		assert.Equal(t, conns[p].token, tok, "rank %d's token for rank %d", c.rank, p)
	}
}

// TestTokensWithFingers: with fingers a rank no longer gets every rank's
// token from the root. It gets those of its fingers and of the ranks that
// dial it in the collectives; a hello from any other rank is refused
// unless it answers a lookup of this rank, and lookups carry the tokens
// both ways.
func TestTokensWithFingers(t *testing.T) {
	logs := &lockedBuffer{}
	opts := loopbackOpts(5 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	const n = 8
	id, conns := tcpConns(t, n, opts)
	ctx := context.Background()
	c0 := conns[0]
	c0.mu.Lock()
	held := make(map[int]bool)
	for p := range c0.tokens {
		held[p] = true
	}
	c0.mu.Unlock()
	assert.Equal(t, map[int]bool{1: true, 2: true, 4: true, 7: true, 6: true}, held, "ranks whose tokens rank 0 holds after Init")
	for _, c := range conns {
		checkTokens(t, c, conns)
	}

	// Rank 3 is neither a finger of rank 0 nor one that dials it.
	f := forge(t, c0.PeerAddr(0), id, 3, n, conns[3].token^1)
	waitClosed(t, f, 2*time.Second)
	f.Close()
	assert.Contains(t, logs.String(), "claims rank 3, whose check-in token this rank has not learned")
	f = forge(t, c0.PeerAddr(0), id, 1, n, 0x1234)
	waitClosed(t, f, 2*time.Second)
	f.Close()
	assert.Contains(t, logs.String(), "claims rank 1 without its check-in token")

	// While rank 0 looks rank 5 up, a stranger claiming rank 5 must echo
	// rank 0's token in its first frame, which it cannot.
	c0.mu.Lock()
	c0.looking[5]++
	c0.mu.Unlock()
	f = forge(t, c0.PeerAddr(0), id, 5, n, 0x5555)
	var hdr [msgHeader]byte
	hdr[0] = classFound
	binary.BigEndian.PutUint64(hdr[1:], 5)
	body := binary.BigEndian.AppendUint64(nil, 0x1234)
	require.NoError(t, writeFrame(f, hdr[:], append(body, "127.0.0.1:9"...)))
	waitClosed(t, f, 2*time.Second)
	f.Close()
	c0.mu.Lock()
	_, learned := c0.tokens[5]
	c0.looking[5]--
	delete(c0.looking, 5)
	c0.mu.Unlock()
	assert.False(t, learned, "rank 0 took a stranger's token for rank 5")
	assert.Contains(t, logs.String(), "is no answer to this rank's lookup")

	// The real ranks 0 and 3 get through both ways, and learn each
	// other's tokens by the lookup.
	require.NoError(t, conns[0].Send(ctx, 3, 1, []byte("to 3")))
	got, err := conns[3].Recv(ctx, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, "to 3", string(got))
	require.NoError(t, conns[3].Send(ctx, 0, 2, []byte("to 0")))
	got, err = conns[0].Recv(ctx, 3, 2)
	require.NoError(t, err)
	assert.Equal(t, "to 0", string(got))
	for _, c := range conns {
		checkTokens(t, c, conns)
	}
	c0.mu.Lock()
	assert.Equal(t, conns[3].token, c0.tokens[3])
	c0.mu.Unlock()
}

// TestLookupsBothWays: pairs of non-finger ranks that send to each other
// at once, each looking the other up, must not refuse each other's
// connections (the target of a lookup may send to the origin before the
// origin holds its token: the answer goes first on that connection).
func TestLookupsBothWays(t *testing.T) {
	logs := &lockedBuffer{}
	opts := loopbackOpts(10 * time.Second)
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const n = 12
	_, conns := tcpConns(t, n, opts)
	ctx := context.Background()
	for _, d := range []int{3, 5, 6, 7} {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Go(func() {
				errs[r] = func() error {
					up, down := (r+d)%n, (r-d+n)%n
					var sw sync.WaitGroup
					var e1, e2 error
					sw.Go(func() { e1 = conns[r].Send(ctx, up, d, []byte{byte(r)}) })
					sw.Go(func() { e2 = conns[r].Send(ctx, down, d, []byte{byte(r)}) })
					for _, p := range []int{up, down} {
						b, err := conns[r].Recv(ctx, p, d)
						if err != nil {
							return err
						}
						if len(b) != 1 || int(b[0]) != p {
							return fmt.Errorf("from rank %d: got %v", p, b)
						}
					}
					sw.Wait()
					if e1 != nil {
						return e1
					}
					return e2
				}()
			})
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "distance %d: rank %d", d, r)
		}
	}
	// A target that sends to the origin the moment it knows the origin's
	// address: its message must not overtake the answer.
	for o := range n {
		tg := (o + 3) % n
		early := make(chan error, 1)
		go func() {
			for conns[tg].PeerAddr(o) == "" {
				time.Sleep(10 * time.Microsecond)
			}
			early <- conns[tg].Send(ctx, o, 100, []byte("early"))
		}()
		require.NoError(t, conns[o].Send(ctx, tg, 100, []byte("hello")))
		require.NoError(t, <-early)
		got, err := conns[o].Recv(ctx, tg, 100)
		require.NoError(t, err, "rank %d from rank %d", o, tg)
		assert.Equal(t, "early", string(got))
		got, err = conns[tg].Recv(ctx, o, 100)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(got))
	}
	assert.NotContains(t, logs.String(), "rejected connection")
	for _, c := range conns {
		checkTokens(t, c, conns)
	}
}

// TestScalableTokens: with several roots, the tokens of ranks that
// checked in with another root reach a rank through the slices the roots
// push to each other.
func TestScalableTokens(t *testing.T) {
	const n, k = 10, 3
	opts := loopbackOpts(20 * time.Second)
	ctx := context.Background()
	roots, ids := startRoots(t, k, opts)
	conns := make([]*Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { conns[r], errs[r] = JoinScalable(ctx, ids, r, n, opts) })
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i, root := range roots {
		require.NoError(t, root.Wait(ctx), "root %d", i)
	}
	for _, c := range conns {
		c.mu.Lock()
		held := len(c.tokens)
		c.mu.Unlock()
		assert.GreaterOrEqual(t, held, rounds(n), "rank %d holds tokens", c.rank)
		checkTokens(t, c, conns)
	}
	// Rank 0 (root 0) to rank 9 (root 2): a lookup across slices.
	require.NoError(t, conns[0].Send(ctx, 9, 3, []byte("x")))
	got, err := conns[9].Recv(ctx, 0, 3)
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
}

// TestCheckInBurst: the hello cap used to close the oldest connection
// awaiting its hello as soon as a new one came, so that 256 ranks
// checking in at once with one root (ncclsim) had real ranks cut off
// before the root read their hellos. A full set now makes new
// connections wait in the backlog until the oldest has waited
// minPendingAge. Here the cap is 4 and 32 ranks check in at once.
func TestCheckInBurst(t *testing.T) {
	old := maxPendingHellos
	maxPendingHellos = 4
	defer func() { maxPendingHellos = old }()
	nets := initTCP(t, 32, loopbackOpts(10*time.Second))
	onAll(t, nets, func(nw Network) error { return nw.Barrier(context.Background()) })
}

// TestReplyNeedsToken checks the answers a rank reads on a connection it
// opened (the way down the collectives' tree): they count only after the
// peer's hello with the check-in token this rank holds for it.
func TestReplyNeedsToken(t *testing.T) {
	const magic, token = 0x1234, 42
	for _, tc := range []struct {
		name  string
		hello hello
		ok    bool
	}{
		{"right token", hello{magic: magic, kind: helloPeer, rank: 1, nRanks: 2, token: token}, true},
		{"wrong token", hello{magic: magic, kind: helloPeer, rank: 1, nRanks: 2, token: token + 1}, false},
		{"other rank", hello{magic: magic, kind: helloPeer, rank: 0, nRanks: 2, token: token}, false},
		{"wrong magic", hello{magic: magic + 1, kind: helloPeer, rank: 1, nRanks: 2, token: token}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{opState: opState{rank: 0, timeout: time.Second}, size: 2, magic: magic, log: quietLogger,
				box: newMailbox(), maxMsg: 1 << 10, maxQ: 1 << 12, tokens: map[int]uint64{1: token}}
			mine, theirs := net.Pipe()
			defer theirs.Close()
			c.wg.Add(1)
			go c.readReplies(1, mine)
			var hdr [msgHeader]byte
			hdr[0] = classColl
			binary.BigEndian.PutUint64(hdr[1:], uint64(7))
			frames := appendFrame(appendFrame(nil, tc.hello.encode()), hdr[:], []byte("down"))
			_, werr := theirs.Write(frames)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			got, err := c.box.recv(ctx, msgKey{peer: 1, class: classColl, tag: 7})
			if tc.ok {
				require.NoError(t, werr)
				require.NoError(t, err)
				assert.Equal(t, "down", string(got))
				theirs.Close()
			} else {
				require.Error(t, err, "a message after a bad hello was delivered")
			}
			c.wg.Wait() // readReplies ends: stream closed or rejected
		})
	}
}
