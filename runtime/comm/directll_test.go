package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/devicesrc"
)

// llSim runs the DIRECT LL one-shot's protocol (devicesrc/direct.h,
// ngAllReduceDirectLL) on goroutines: nRanks ranks, each with nThreads
// threads, over shared line buffers. A line is two atomic 8-byte halves
// {data u32, flag u32}, the unit the GPU stores whole; the two halves of a
// line may tear, as on the GPU. Each rank runs calls in order: its threads
// read the call count, store the rank's lines into buffer s&1 (all of them
// when s mod fullPeriod < 2), pass a barrier, then poll every peer's lines
// until both flags are flag(s) and check the data is that peer's call-s
// data. A call ends when every thread ends (the kernel's __syncthreads
// between works).
type llSim struct {
	nRanks, nThreads, capLines int
	flagMod                    uint64 // flag(s) = s%flagMod + 1 (the device: 0xFFFFFFFF)
	fullPeriod                 uint64 // 0: never write a buffer whole
	sizes                      []int  // lines of call s, the same on every rank
	// beforeWrite and beforePoll, when set, run before a rank stores the
	// lines of call s and before it polls its peers' (after its barrier).
	beforeWrite, beforePoll func(rank int, s uint64)
	// oneBuffer makes every call use buffer 0 (to show that two are needed).
	oneBuffer bool

	bufs     [][2][][2]atomic.Uint64 // [rank][parity][line][half]
	finished []atomic.Uint64         // calls each rank completed
	errs     chan error
}

func (m *llSim) flag(s uint64) uint32 { return uint32(s%m.flagMod) + 1 }

// llData is what rank p stores in half h of line l at call s: unique for
// every (p, s, l, h) the tests use, and never 0 (the padding's data).
func llData(p int, s uint64, l, h int) uint32 {
	return uint32(p)<<28 | uint32(h)<<27 | uint32(l)<<20 | uint32(s&0xFFFFF) | 1<<19
}

func (m *llSim) fail(format string, args ...any) {
	select {
	case m.errs <- fmt.Errorf(format, args...):
	default:
	}
}

func (m *llSim) maybeYield(rng *rand.Rand) {
	if rng.IntN(3) == 0 {
		runtime.Gosched()
	}
}

// run runs every rank's calls and returns the first error: a stale or
// future line read, a buffer overwritten while a peer could still read it,
// or a wait that did not end before ctx (a deadlock).
func (m *llSim) run(ctx context.Context, seed uint64) error {
	m.bufs = make([][2][][2]atomic.Uint64, m.nRanks)
	for r := range m.bufs {
		for p := range 2 {
			m.bufs[r][p] = make([][2]atomic.Uint64, m.capLines)
		}
	}
	m.finished = make([]atomic.Uint64, m.nRanks)
	m.errs = make(chan error, 1)
	var wg sync.WaitGroup
	for r := range m.nRanks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.rank(ctx, r, seed)
		}()
	}
	wg.Wait()
	select {
	case err := <-m.errs:
		return err
	default:
		return nil
	}
}

func (m *llSim) rank(ctx context.Context, r int, seed uint64) {
	var seq uint64 // the slot's llSeq
	for s := range uint64(len(m.sizes)) {
		if ctx.Err() != nil {
			return
		}
		if seq != s {
			m.fail("rank %d: llSeq %d at call %d", r, seq, s)
			return
		}
		// Reuse safety: before this rank stores into buffer s&1 again,
		// every peer has finished call s-2, the last that read it.
		if s >= 2 {
			for q := range m.nRanks {
				if f := m.finished[q].Load(); f < s-1 {
					m.fail("rank %d stores call %d while rank %d has finished only %d calls", r, s, q, f)
					return
				}
			}
		}
		nLines := m.sizes[s]
		nWrite := nLines
		if m.fullPeriod != 0 && s%m.fullPeriod < 2 {
			nWrite = m.capLines
		}
		flag := uint64(m.flag(s)) << 32
		parity := s & 1
		if m.oneBuffer {
			parity = 0
		}
		own := m.bufs[r][parity]
		phase := func(body func(t int, rng *rand.Rand)) {
			var wg sync.WaitGroup
			for t := range m.nThreads {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body(t, rand.New(rand.NewPCG(seed, uint64(r)<<40|s<<8|uint64(t))))
				}()
			}
			wg.Wait()
		}
		// Stores, then the group barrier (the end of this phase), then
		// llSeq = s+1, then the polls.
		if m.beforeWrite != nil {
			m.beforeWrite(r, s)
		}
		phase(func(t int, rng *rand.Rand) {
			for l := t; l < nWrite; l += m.nThreads {
				for _, h := range rng.Perm(2) { // the halves land in any order
					var d uint32
					if l < nLines {
						d = llData(r, s, l, h)
					}
					own[l][h].Store(flag | uint64(d))
					m.maybeYield(rng)
				}
			}
		})
		seq = s + 1
		if m.beforePoll != nil {
			m.beforePoll(r, s)
		}
		phase(func(t int, rng *rand.Rand) {
			for l := t; l < nLines; l += m.nThreads {
				for p := range m.nRanks {
					if p == r {
						continue
					}
					line := &m.bufs[p][parity][l]
					for {
						a, b := line[0].Load(), line[1].Load()
						if a>>32 == flag>>32 && b>>32 == flag>>32 {
							for h, v := range []uint64{a, b} {
								if got, want := uint32(v), llData(p, s, l, h); got != want {
									m.fail("rank %d call %d: line %d half %d of rank %d holds %#x, want %#x (flag %d)",
										r, s, l, h, p, got, want, flag>>32)
								}
							}
							break
						}
						if ctx.Err() != nil {
							m.fail("rank %d call %d: waited for line %d of rank %d (flag %d), it holds flags %d, %d: %w",
								r, s, l, p, flag>>32, a>>32, b>>32, ctx.Err())
							return
						}
						runtime.Gosched()
					}
					m.maybeYield(rng)
				}
			}
		})
		m.finished[r].Store(s + 1)
	}
}

// TestDirectLLProtocol runs the LL one-shot's protocol with random sizes
// and interleavings: no rank reads a stale or a future call's line, no rank
// overwrites a buffer a peer may still read, and nobody waits forever. The
// flags wrap every 5 calls here (every 0xFFFFFFFF on the GPU) and the
// buffers are written whole every 8 calls, so wrapped flags meet stale
// lines often.
func TestDirectLLProtocol(t *testing.T) {
	calls := 400
	if testing.Short() {
		calls = 120
	}
	for _, c := range []struct{ ranks, threads int }{{2, 1}, {2, 3}, {3, 2}, {5, 2}} {
		t.Run(fmt.Sprintf("%d ranks %d threads", c.ranks, c.threads), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.ranks), uint64(c.threads)))
			m := &llSim{nRanks: c.ranks, nThreads: c.threads, capLines: 6, flagMod: 5, fullPeriod: 8}
			for range calls {
				m.sizes = append(m.sizes, 1+rng.IntN(m.capLines)) // the device skips empty shares
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, m.run(ctx, rng.Uint64()))
		})
	}
}

// Without the periodic whole writes, a line a call does not write keeps
// its flag, and once the flag wraps a reader takes it for the current
// call's: the simulation reports the stale read. Call 1 writes 6 lines,
// calls 2-10 one line, call 11 six again: flag(11) == flag(1) with the
// flags wrapping every 5 calls. Rank 1 stores call 11 late, so rank 0
// polls its buffer before.
func TestDirectLLProtocolCatchesStaleFlags(t *testing.T) {
	sizes := []int{1, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1}
	late := func(rank int, s uint64) {
		if rank == 1 && s == 11 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &llSim{nRanks: 2, nThreads: 2, capLines: 6, flagMod: 5, sizes: sizes, beforeWrite: late}
	err := m.run(ctx, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 0 call 11")
	assert.Contains(t, err.Error(), "want")

	// With them (every 8 calls: the stale lines are at most 6 calls old,
	// the flag repeats with the same parity every 10) the same run is clean.
	m = &llSim{nRanks: 2, nThreads: 2, capLines: 6, flagMod: 5, fullPeriod: 8, sizes: sizes, beforeWrite: late}
	require.NoError(t, m.run(ctx, 1))
}

// One buffer instead of two (by parity) lets a rank overwrite lines a
// slower peer has yet to read: rank 1 stalls between its stores and its
// polls of call 10, rank 0 finishes call 10 and stores call 11 over it, and
// rank 1 waits for a flag that never comes (the simulation's deadline
// reports it; the random interleavings often get there before call 10).
func TestDirectLLProtocolNeedsTwoBuffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m := &llSim{nRanks: 2, nThreads: 1, capLines: 2, flagMod: 0xFFFFFFFF, oneBuffer: true}
	for range 20 {
		m.sizes = append(m.sizes, 2)
	}
	m.beforePoll = func(rank int, s uint64) {
		if rank == 1 && s == 10 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	err := m.run(ctx, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "waited for line")

	// Two buffers: the same run is clean.
	m.oneBuffer = false
	require.NoError(t, m.run(context.Background(), 2))
}

// The device's constants keep the property the simulation relies on: a
// line of buffer s&1 dates from fewer calls back than the flag's period
// with that parity (2·0xFFFFFFFF).
func TestDirectLLDeviceConstants(t *testing.T) {
	src, err := devicesrc.FS.ReadFile("direct.h")
	require.NoError(t, err)
	mm := regexp.MustCompile(`#define NG_DIRECT_LL_FULL_PERIOD \(1ull << (\d+)\)`).FindSubmatch(src)
	require.NotNil(t, mm, "direct.h defines NG_DIRECT_LL_FULL_PERIOD as (1ull << k)")
	k, err := strconv.Atoi(string(mm[1]))
	require.NoError(t, err)
	prims, err := devicesrc.FS.ReadFile("ng_prims.h")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(prims), "(uint32_t)(step % 0xFFFFFFFFull) + 1u"),
		"ngLLFlag is step %% 0xFFFFFFFF + 1")
	assert.Less(t, uint64(1)<<k, uint64(2*0xFFFFFFFF))
	assert.GreaterOrEqual(t, k, 2)
}
