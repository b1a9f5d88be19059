// Package launch places this process in a multi-process job and starts
// such jobs without MPI.
//
// FromEnv reads the rank, the job size and the rank within the host from
// the environment of whichever launcher started the process: ncclgo's own
// (Spawn), Open MPI's mpirun, MPICH/PMI, torchrun, or Slurm's srun.
// Spawn starts n copies of a program on this host, one rank each, with
// ncclgo's variables set and the communicator's unique id passed along.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ncclgo's own launcher variables, set by Spawn.
const (
	EnvRank      = "NCCLGO_LAUNCH_RANK"
	EnvSize      = "NCCLGO_LAUNCH_SIZE"
	EnvLocalRank = "NCCLGO_LAUNCH_LOCAL_RANK"
	EnvLocalSize = "NCCLGO_LAUNCH_LOCAL_SIZE"
	// EnvID carries the communicator's unique id in text form.
	EnvID = "NCCLGO_LAUNCH_ID"
)

// Place is where this process sits in a job.
type Place struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// Launcher names the launcher whose variables were read: "ncclgo",
	// "mpirun", "pmi", "torchrun" or "slurm".
	Launcher string
	// ID is the unique id that Spawn passed (empty under other launchers:
	// the ranks must then agree on one themselves, rank 0 creating it).
	ID string
	// MasterAddr is torchrun's MASTER_ADDR:MASTER_PORT, when set.
	MasterAddr string
}

// launcher is one launcher's variable names, in the order FromEnv tries
// them.
type launcher struct {
	name                         string
	rank, size, local, localSize string
}

var launchers = []launcher{
	{"ncclgo", EnvRank, EnvSize, EnvLocalRank, EnvLocalSize},
	{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
}

// ErrNotLaunched is returned by FromEnv when no launcher's variables are
// set: the process runs alone.
var ErrNotLaunched = errors.New("launch: no launcher's rank variables are set")

// FromEnv reads the process's place from getenv (os.Getenv normally). The
// first launcher whose rank and size variables are both set wins; its
// local rank defaults to the rank and its local size to the size (one
// host). It returns ErrNotLaunched when none is set, and an error naming
// the variable when one is malformed or out of range.
func FromEnv(getenv func(string) string) (Place, error) {
	for _, l := range launchers {
		rs, ss := strings.TrimSpace(getenv(l.rank)), strings.TrimSpace(getenv(l.size))
		if rs == "" || ss == "" {
			continue
		}
		p := Place{Launcher: l.name}
		var err error
		num := func(name, s string, def int) int {
			if s = strings.TrimSpace(s); s == "" {
				return def
			}
			// Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)".
			if i := strings.IndexByte(s, '('); i > 0 {
				s = s[:i]
			}
			v, e := strconv.Atoi(s)
			if e != nil || v < 0 {
				err = errors.Join(err, fmt.Errorf("launch: %s=%q: want an integer from 0", name, s))
			}
			return v
		}
		p.Rank = num(l.rank, rs, 0)
		p.Size = num(l.size, ss, 0)
		p.LocalRank = num(l.local, getenv(l.local), p.Rank)
		p.LocalSize = num(l.localSize, getenv(l.localSize), p.Size)
		if err != nil {
			return Place{}, err
		}
		switch {
		case p.Size < 1 || p.Rank >= p.Size:
			return Place{}, fmt.Errorf("launch: %s=%d with %s=%d: want 0 <= rank < size", l.rank, p.Rank, l.size, p.Size)
		case p.LocalSize < 1 || p.LocalRank >= p.LocalSize || p.LocalSize > p.Size:
			return Place{}, fmt.Errorf("launch: %s=%d with %s=%d (job of %d): want 0 <= local rank < local size <= size",
				l.local, p.LocalRank, l.localSize, p.LocalSize, p.Size)
		}
		if l.name == "ncclgo" {
			p.ID = strings.TrimSpace(getenv(EnvID))
		}
		if a, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT"); l.name == "torchrun" && a != "" && port != "" {
			p.MasterAddr = a + ":" + port
		}
		return p, nil
	}
	return Place{}, ErrNotLaunched
}

// Job is a set of rank processes started by Spawn.
type Job struct {
	cmds []*exec.Cmd
	done chan struct{} // closed when every rank has exited

	mu     sync.Mutex
	errs   []error // per rank, once it exited
	failed bool
}

// Spawn starts n copies of prog with args on this host, rank r with
// EnvRank=r, EnvSize=n, EnvLocalRank=r, EnvLocalSize=n and EnvID=id added
// to env (nil: this process's environment). Rank r's standard output and
// error go to out(r) (nil out: this process's). Cancelling ctx kills the
// ranks, and so does this process's death (the kernel's parent-death
// signal), so that no rank outlives its launcher.
func Spawn(ctx context.Context, n int, prog string, args []string, env []string, id string, out func(rank int) (stdout, stderr io.Writer)) (*Job, error) {
	return SpawnEach(ctx, n, prog, args, func(int) []string { return env }, id, out)
}

// SpawnEach is Spawn with an environment per rank: rank r's is env(r)
// (nil env or a nil result: this process's environment), with Spawn's
// variables added.
func SpawnEach(ctx context.Context, n int, prog string, args []string, env func(rank int) []string, id string, out func(rank int) (stdout, stderr io.Writer)) (*Job, error) {
	if n < 1 {
		return nil, fmt.Errorf("launch: %d ranks: want at least 1", n)
	}
	rankEnv := func(r int) []string {
		var e []string
		if env != nil {
			e = env(r)
		}
		if e == nil {
			e = os.Environ()
		}
		var clean []string
		for _, kv := range e {
			if !strings.HasPrefix(kv, "NCCLGO_LAUNCH_") {
				clean = append(clean, kv)
			}
		}
		return append(clean,
			EnvRank+"="+strconv.Itoa(r), EnvSize+"="+strconv.Itoa(n),
			EnvLocalRank+"="+strconv.Itoa(r), EnvLocalSize+"="+strconv.Itoa(n), EnvID+"="+id)
	}
	j := &Job{done: make(chan struct{}), errs: make([]error, n)}
	for r := range n {
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Env = rankEnv(r)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if out != nil {
			cmd.Stdout, cmd.Stderr = out(r)
		}
		cmd.SysProcAttr = dieWithParent()
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			for _, c := range j.cmds {
				_ = c.Process.Signal(syscall.SIGKILL)
				_ = c.Wait()
			}
			return nil, fmt.Errorf("launch: starting rank %d (%s): %w", r, prog, err)
		}
		j.cmds = append(j.cmds, cmd)
	}
	var wg sync.WaitGroup
	for r, cmd := range j.cmds {
		wg.Go(func() {
			err := cmd.Wait()
			j.mu.Lock()
			if err != nil {
				j.errs[r] = fmt.Errorf("launch: rank %d (pid %d): %w", r, cmd.Process.Pid, err)
				j.failed = true
			}
			j.mu.Unlock()
		})
	}
	go func() { wg.Wait(); close(j.done) }()
	return j, nil
}

// Pids lists the ranks' process ids.
func (j *Job) Pids() []int {
	out := make([]int, len(j.cmds))
	for r, c := range j.cmds {
		out[r] = c.Process.Pid
	}
	return out
}

// Kill sends SIGKILL to rank r's process.
func (j *Job) Kill(r int) error {
	if r < 0 || r >= len(j.cmds) {
		return fmt.Errorf("launch: rank %d: want 0..%d", r, len(j.cmds)-1)
	}
	if err := j.cmds[r].Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("launch: killing rank %d: %w", r, err)
	}
	return nil
}

// Wait waits for every rank and returns the failures, rank by rank. Once
// a rank has failed, the others get grace to notice (their communicator
// errors out and they exit) before they are killed.
func (j *Job) Wait(grace time.Duration) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var failedAt time.Time
	killed := false
	for {
		select {
		case <-j.done:
			j.mu.Lock()
			defer j.mu.Unlock()
			return errors.Join(j.errs...)
		case <-t.C:
		}
		j.mu.Lock()
		failed := j.failed
		j.mu.Unlock()
		if failed && failedAt.IsZero() {
			failedAt = time.Now()
		}
		if !killed && !failedAt.IsZero() && time.Since(failedAt) > grace {
			killed = true
			for r := range j.cmds {
				_ = j.Kill(r)
			}
		}
	}
}
