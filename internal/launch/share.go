package launch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvIDFile names a file, readable by every rank, through which rank 0
// hands the unique id to the others when the launcher provides no address
// (mpirun, srun).
const EnvIDFile = "NCCLGO_ID_FILE"

// EnvIDPort overrides the port that ShareID serves the id on under
// torchrun (default MASTER_PORT+1: torchrun's own store holds MASTER_PORT).
const EnvIDPort = "NCCLGO_ID_PORT"

// ShareID returns the communicator's unique id (in text form) on every
// rank of the job: the one Spawn passed; else rank 0 calls create and
// serves the result over TCP at MASTER_ADDR:MASTER_PORT+1 (torchrun) or
// writes it to the file $NCCLGO_ID_FILE (any launcher), and the other
// ranks fetch it, waiting until ctx is done.
func ShareID(ctx context.Context, p Place, getenv func(string) string, create func() (string, error)) (string, error) {
	if p.ID != "" {
		return p.ID, nil
	}
	if p.Size == 1 {
		return create()
	}
	if f := getenv(EnvIDFile); f != "" {
		return shareByFile(ctx, p, f, create)
	}
	if p.MasterAddr != "" {
		addr, err := idAddr(p.MasterAddr, getenv(EnvIDPort))
		if err != nil {
			return "", err
		}
		return shareByTCP(ctx, p, addr, create)
	}
	if f := DefaultIDFile(p, getenv); f != "" {
		return shareByFile(ctx, p, f, create)
	}
	return "", fmt.Errorf("launch: under %s the unique id must reach the ranks: set %s to a path every rank can read", p.Launcher, EnvIDFile)
}

// DefaultIDFile is the file through which ShareID passes the id when
// neither $NCCLGO_ID_FILE nor torchrun's MASTER_ADDR says how: for a job
// on one host (local size = size) whose launcher names the job (PMIx's
// PMIX_NAMESPACE, Open MPI 4's OMPI_MCA_ess_base_jobid, Slurm's
// SLURM_JOB_ID and SLURM_STEP_ID), a file named after the job in the
// temporary directory; else "".
func DefaultIDFile(p Place, getenv func(string) string) string {
	if p.LocalSize != p.Size {
		return ""
	}
	key := ""
	switch {
	case getenv("PMIX_NAMESPACE") != "":
		key = getenv("PMIX_NAMESPACE")
	case getenv("OMPI_MCA_ess_base_jobid") != "":
		key = getenv("OMPI_MCA_ess_base_jobid")
	case getenv("SLURM_JOB_ID") != "":
		key = getenv("SLURM_JOB_ID") + "." + getenv("SLURM_STEP_ID")
	default:
		return ""
	}
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, key)
	return filepath.Join(os.TempDir(), fmt.Sprintf("ncclgo-id-%d-%s-%s", os.Getuid(), p.Launcher, safe))
}

// idFile is the file ShareID used for p, if any (for its removal once
// every rank has the id).
func idFile(p Place, getenv func(string) string) string {
	if p.ID != "" || p.Size == 1 {
		return ""
	}
	if f := getenv(EnvIDFile); f != "" {
		return f
	}
	if p.MasterAddr != "" {
		return ""
	}
	return DefaultIDFile(p, getenv)
}

// idAddr is MASTER_ADDR with port MASTER_PORT+1 or the override.
func idAddr(master, override string) (string, error) {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return "", fmt.Errorf("launch: MASTER_ADDR:MASTER_PORT %q: %w", master, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p >= 65535 {
		return "", fmt.Errorf("launch: MASTER_PORT=%q: want a port below 65535", port)
	}
	p++
	if override != "" {
		if p, err = strconv.Atoi(override); err != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("launch: %s=%q: want a port", EnvIDPort, override)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

func shareByFile(ctx context.Context, p Place, path string, create func() (string, error)) (string, error) {
	if p.Rank == 0 {
		id, err := create()
		if err != nil {
			return "", err
		}
		tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
		if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("launch: writing the id: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", fmt.Errorf("launch: publishing the id: %w", err)
		}
		return id, nil
	}
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b)), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("launch: rank %d: waiting for rank 0's id in %s: %w", p.Rank, path, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// maxIDLine bounds the line an id is read from (ids are far shorter).
const maxIDLine = 4096

// shareByTCP: rank 0 answers every connection with the id, and each
// other rank acknowledges it with its rank number, until all Size-1 have
// (a connection that acknowledges nothing, a port scanner's or a rank's
// failed attempt, does not count) or ctx is done.
func shareByTCP(ctx context.Context, p Place, addr string, create func() (string, error)) (string, error) {
	if p.Rank == 0 {
		id, err := create()
		if err != nil {
			return "", err
		}
		if err := serveID(ctx, p, addr, id); err != nil {
			return "", err
		}
		return id, nil
	}
	var d net.Dialer
	var last error // the last failure before ctx ended
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			// Whatever answers at addr sends at most maxIDLine bytes here.
			line, rerr := bufio.NewReader(io.LimitReader(c, maxIDLine)).ReadString('\n')
			if rerr == nil {
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				_, _ = fmt.Fprintf(c, "%d\n", p.Rank)
				c.Close()
				return strings.TrimSpace(line), nil
			}
			c.Close()
			if len(line) == maxIDLine {
				rerr = fmt.Errorf("%s answered a line longer than %d bytes, not an id", addr, maxIDLine-1)
			}
			err = rerr
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("launch: rank %d: fetching the id from %s: %w (last: %v)", p.Rank, addr, context.Cause(ctx), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serveID is rank 0's side of shareByTCP.
func serveID(ctx context.Context, p Place, addr, id string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("launch: serving the id at %s: %w", addr, err)
	}
	acks := make(chan int)
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write([]byte(id + "\n")); err != nil {
					return
				}
				line, err := bufio.NewReader(io.LimitReader(c, 32)).ReadString('\n')
				r, perr := strconv.Atoi(strings.TrimSpace(line))
				if err != nil || perr != nil {
					return
				}
				select {
				case acks <- r:
				case <-stopped:
				}
			})
		}
	})
	defer func() {
		ln.Close()
		close(stopped)
		wg.Wait()
	}()
	got := make([]bool, p.Size)
	for n := 0; n < p.Size-1; {
		select {
		case r := <-acks:
			if r > 0 && r < p.Size && !got[r] {
				got[r] = true
				n++
			}
		case <-ctx.Done():
			var missing []string
			for r := 1; r < p.Size; r++ {
				if !got[r] {
					missing = append(missing, strconv.Itoa(r))
				}
			}
			return fmt.Errorf("launch: serving the id at %s: rank(s) %s never fetched it: %w", addr, strings.Join(missing, ", "), context.Cause(ctx))
		}
	}
	return nil
}
