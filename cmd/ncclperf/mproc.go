package main

// Ranks as processes. `ncclperf -np N` is a launcher: it starts the job's
// bootstrap root, spawns itself N times through internal/launch and waits.
// Each spawned process, like each process that mpirun, torchrun or srun
// starts, runs one rank (runRank): it joins the job's control channel
// (launch.Group), runs the sweep with a communicator of one local rank
// (InitRank, ncclCommInitRank), and after each size hands its times and
// wrong counts to the others, which combine them as nccl-tests combines
// its MPI ranks' (-a). Rank 0 prints the tables.
//
// A rank that fails exits without leaving the group: the others' waits
// (the control channel's exchanges, the stream drains, ncclgo's own
// liveness watch) end with an error naming it, and they exit non-zero.
// Should a rank stay stuck in a call that cannot be interrupted, it exits
// lostExitGrace after the loss was seen; the launcher kills what is left
// killGrace after the first failure, and reaps every rank.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ncclgo/ncclgo/internal/launch"
)

// How the ranks' times combine into the table's (nccl-tests' -a).
const (
	avgRank0 = iota // rank 0's
	avgMean         // the mean (nccl-tests' default)
	avgMin
	avgMax
)

var averageNames = []string{"rank 0's time", "mean over ranks", "minimum over ranks", "maximum over ranks"}

const (
	// killGrace is how long the launcher lets the other ranks notice a
	// failed one and exit on their own before it kills them.
	killGrace = 10 * time.Second
	// lostExitGrace is how long a rank that saw another lost may take to
	// end cleanly before it exits anyway.
	lostExitGrace = 8 * time.Second
)

// spawn is `ncclperf -np N`: it runs args (ncclperf's own) as N rank
// processes of this executable and returns once every one has exited:
// nil when all succeeded, else an error naming each that failed. Rank 0
// writes to stdout, the others' output goes to stderr (only their
// errors). SIGINT and SIGTERM kill the ranks.
func spawn(c *config, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("-np %d: finding this executable to spawn: %w", c.np, err)
	}
	id, stopRoot, err := launch.NewRoot(ctx)
	if err != nil {
		return err
	}
	defer stopRoot()
	job, err := launch.SpawnEach(ctx, c.np, exe, args, hostEnv(os.Environ(), c.np, c.hosts, os.Getpid()), id, func(r int) (io.Writer, io.Writer) {
		if r == 0 {
			return stdout, stderr
		}
		return stderr, stderr
	})
	if err != nil {
		return err
	}
	if err := job.Wait(killGrace); err != nil {
		return fmt.Errorf("-np %d: %w", c.np, err)
	}
	return nil
}

// envHostID is NCCL's host identity variable: ranks with the same value
// are on one host (P2P, SHM), ranks with different ones on different
// hosts (NET).
const envHostID = "NCCL_HOSTID"

// hostOf is the fake host of rank r of n split over hosts: blocks of
// consecutive ranks whose sizes differ by at most one, none empty for
// hosts <= n.
func hostOf(r, n, hosts int) int { return r * hosts / n }

// hostEnv is the environment of each of the n ranks of -np n -hosts
// hosts: base, with NCCL_HOSTID=<prefix>-host<k> for a rank on fake host
// k (hostOf). The prefix is base's NCCL_HOSTID when set, else ncclperf
// and the launcher's pid, so that the hosts of two jobs differ. For
// hosts < 2 (one host) it is base for every rank.
func hostEnv(base []string, n, hosts, pid int) func(r int) []string {
	if hosts < 2 {
		return func(int) []string { return base }
	}
	prefix := "ncclperf" + strconv.Itoa(pid)
	var rest []string
	for _, kv := range base {
		if v, ok := strings.CutPrefix(kv, envHostID+"="); ok {
			if v != "" {
				prefix = v
			}
			continue
		}
		rest = append(rest, kv)
	}
	return func(r int) []string {
		return append(rest[:len(rest):len(rest)], envHostID+"="+prefix+"-host"+strconv.Itoa(hostOf(r, n, hosts)))
	}
}

// mpRank is this process's rank in a job of ranks in several processes.
type mpRank struct {
	g *launch.Group
}

// alive is nil while every rank of the job runs (always, for nil m), else
// the error naming the rank lost.
func (m *mpRank) alive() error {
	if m == nil {
		return nil
	}
	return m.g.Err()
}

// barrier waits until every rank of the job has reached it (the control
// channel's Barrier); with nil m (one process) it returns at once. It ends
// with an error naming the rank lost, should one be.
func (m *mpRank) barrier() error {
	if m == nil {
		return nil
	}
	if err := m.g.Barrier(context.Background()); err != nil {
		if lost := m.g.Err(); lost != nil {
			return lost
		}
		return err
	}
	return nil
}

// runRank runs this process's one rank of a launched job (c.place).
func runRank(c *config, w io.Writer) (err error) {
	p := *c.place
	defer func() {
		if err != nil {
			err = fmt.Errorf("rank %d of %d: %w", p.Rank, p.Size, err)
		}
	}()
	ctx := context.Background()
	g, err := launch.Join(ctx, p, os.Getenv)
	if err != nil {
		return err
	}
	// Leave the group (saying goodbye) only after a success: a rank that
	// fails exits without, and the others see it lost.
	defer func() {
		if err == nil {
			if err = g.Barrier(ctx); err == nil {
				err = g.Close()
			}
		}
	}()
	exitWhenLost(g, lostExitGrace)
	// The driver first: a rank without one fails on its own, whichever
	// rank's exchange with the others would have noticed the loss first.
	n, err := deviceCount()
	if err != nil {
		return err
	}
	if c.seed, err = agreeSeed(ctx, g, c.seed); err != nil {
		return err
	}
	c.mp, c.rank0 = &mpRank{g: g}, p.Rank
	if p.Rank != 0 {
		w = io.Discard
	}
	dev := rankDevice(c.devices, p, n)
	if c.devices == nil {
		devs, err := g.AllGather(ctx, []byte(strconv.Itoa(dev)))
		if err != nil {
			return err
		}
		for _, b := range devs {
			d, _ := strconv.Atoi(string(b))
			c.devices = append(c.devices, d)
		}
	}
	return c.measure(w, []int{dev})
}

// agreeSeed returns rank 0's data seed, which every rank of g uses: the
// processes of a job choose their seeds independently (from the clock,
// unless NCCLGO_TEST_SEED is set), and a rank's check compares with the
// data the others filled.
func agreeSeed(ctx context.Context, g *launch.Group, mine dataSeed) (dataSeed, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return mine, err
	}
	all, err := g.AllGather(ctx, b)
	if err != nil {
		return mine, fmt.Errorf("agreeing on the data seed: %w", err)
	}
	var s dataSeed
	if err := json.Unmarshal(all[0], &s); err != nil {
		return mine, fmt.Errorf("rank 0's data seed %.64q: %w", all[0], err)
	}
	return s, nil
}

// rankDevice is the device of the rank at p: its entry of -devices, else
// its local rank modulo the visible devices.
func rankDevice(devices []int, p launch.Place, visible int) int {
	if devices != nil {
		return devices[p.Rank]
	}
	return p.LocalRank % max(visible, 1)
}

// exitWhenLost ends the process grace after another rank of g was lost,
// should it still run: a call that waits for the lost rank and cannot be
// interrupted (NCCL's) must not keep it alive.
func exitWhenLost(g *launch.Group, grace time.Duration) {
	context.AfterFunc(g.Context(), func() {
		lost := g.Err()
		if lost == nil {
			return // left normally
		}
		time.AfterFunc(grace, func() {
			fmt.Fprintf(os.Stderr, "ncclperf: rank %d: %v; still running %v later: exiting\n", g.Rank(), lost, grace)
			os.Exit(1)
		})
	})
}

// rankResult is one rank's measurement of one size, as the ranks exchange
// it.
type rankResult struct {
	Usec, IPUsec   float64
	Host, IPHost   float64
	Wrong, IPWrong int
	HasIP          bool
	Rank           int
}

// combine exchanges this rank's rw with every other rank's and returns the
// row the table prints: times combined by -a, wrong counts summed,
// bandwidths computed from the combined times (nccl-tests' Allreduce of
// its ranks' times and wrong counts).
func (m *mpRank) combine(c *config, rw row) (row, error) {
	mine, err := json.Marshal(rankResult{Usec: rw.oop.usec, IPUsec: rw.ip.usec, Host: rw.oop.hostUsec, IPHost: rw.ip.hostUsec,
		Wrong: rw.oop.wrong, IPWrong: rw.ip.wrong, HasIP: !rw.ipNA, Rank: m.g.Rank()})
	if err != nil {
		return rw, err
	}
	blocks, err := m.g.AllGather(context.Background(), mine)
	if err != nil {
		return rw, err
	}
	all := make([]row, len(blocks))
	for r, b := range blocks {
		var rr rankResult
		if err := json.Unmarshal(b, &rr); err != nil {
			return rw, fmt.Errorf("rank %d's result %q: %w", r, b, err)
		}
		all[r] = row{bytes: rw.bytes, count: rw.count, ipNA: !rr.HasIP,
			oop: result{usec: rr.Usec, hostUsec: rr.Host, wrong: rr.Wrong},
			ip:  result{usec: rr.IPUsec, hostUsec: rr.IPHost, wrong: rr.IPWrong}}
	}
	return c.combineRows(all)
}

// combineRows is the row of a size that every rank measured (rows[r] is
// rank r's): times by c.average, wrong counts summed, bandwidths from the
// combined times.
func (c *config) combineRows(rows []row) (row, error) {
	if len(rows) == 0 {
		return row{}, errors.New("no rank's result")
	}
	out := rows[0]
	for r, rw := range rows {
		if rw.bytes != out.bytes || rw.count != out.count || rw.ipNA != out.ipNA {
			return row{}, fmt.Errorf("rank %d measured %d B (count %d, in-place %v) where rank 0 measured %d B (count %d, in-place %v)",
				r, rw.bytes, rw.count, !rw.ipNA, out.bytes, out.count, !out.ipNA)
		}
	}
	pick := func(get func(row) result) result {
		var res result
		usecs, hosts := make([]float64, len(rows)), make([]float64, len(rows))
		for r, rw := range rows {
			v := get(rw)
			usecs[r], hosts[r] = v.usec, v.hostUsec
			res.wrong += v.wrong
		}
		res.usec, res.hostUsec = c.combineTimes(usecs), c.combineTimes(hosts)
		res.algbw, res.busbw = c.bandwidth(out.count, res.usec)
		return res
	}
	out.oop = pick(func(rw row) result { return rw.oop })
	if !out.ipNA {
		out.ip = pick(func(rw row) result { return rw.ip })
	}
	return out, nil
}

// combineTimes is nccl-tests' -a over the ranks' times t (t[r] is rank r's).
func (c *config) combineTimes(t []float64) float64 {
	switch c.average {
	case avgMean:
		sum := 0.0
		for _, v := range t {
			sum += v
		}
		return sum / float64(len(t))
	case avgMin:
		return slices.Min(t)
	case avgMax:
		return slices.Max(t)
	}
	return t[0]
}
