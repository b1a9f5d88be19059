package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of a child process of TestMultiProcess.
const (
	envChild  = "NCCLGO_BOOTSTRAP_TEST_CHILD" // "1" marks the child role
	envID     = "NCCLGO_BOOTSTRAP_TEST_ID"    // UniqueID in text form
	envRank   = "NCCLGO_BOOTSTRAP_TEST_RANK"
	envNRanks = "NCCLGO_BOOTSTRAP_TEST_NRANKS"
)

// TestMultiProcess runs 4 ranks as 4 OS processes (this test binary,
// re-executed in the child role) against a root in this process. The id
// travels in text form through the environment.
func TestMultiProcess(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	const n = 4
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root, id, err := NewRoot(ctx, loopbackOpts(15*time.Second))
	require.NoError(t, err)
	defer root.Close()

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCL_") && !strings.HasPrefix(kv, "NCCLGO_BOOTSTRAP_TEST_") {
			env = append(env, kv)
		}
	}
	outs := make([]bytes.Buffer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcessChild$", "-test.count=1", "-test.v")
		cmd.Env = append(slices.Clip(env), envChild+"=1", envID+"="+id.String(),
			envRank+"="+strconv.Itoa(r), envNRanks+"="+strconv.Itoa(n), "NCCL_BOOTSTRAP_TIMEOUT=15")
		cmd.Stdout = &outs[r]
		cmd.Stderr = &outs[r]
		wg.Go(func() { errs[r] = cmd.Run() })
	}
	wg.Wait()
	require.NoError(t, root.Wait(ctx))

	re := regexp.MustCompile(`RESULT rank=(\d+) pid=(\d+) allgather=(\S+) ring=(\S+)`)
	pids := map[string]bool{}
	for r := range n {
		require.NoError(t, errs[r], "child %d:\n%s", r, outs[r].String())
		m := re.FindStringSubmatch(outs[r].String())
		require.NotNil(t, m, "child %d printed no result:\n%s", r, outs[r].String())
		assert.Equal(t, strconv.Itoa(r), m[1])
		pids[m[2]] = true
		// Every child saw every rank's pid-tagged block, in rank order.
		parts := strings.Split(m[3], ",")
		require.Len(t, parts, n)
		for p, part := range parts {
			assert.True(t, strings.HasPrefix(part, fmt.Sprintf("r%d@", p)), "child %d block %d = %q", r, p, part)
		}
		assert.Equal(t, fmt.Sprintf("from%d", (r+n-1)%n), m[4])
	}
	assert.Len(t, pids, n, "ranks must run in distinct processes")
	assert.NotContains(t, pids, strconv.Itoa(os.Getpid()))
}

// TestMultiProcessChild is the child role of TestMultiProcess; it skips
// unless started by it.
func TestMultiProcessChild(t *testing.T) {
	if os.Getenv(envChild) != "1" {
		t.Skip("only runs as a child of TestMultiProcess")
	}
	id, err := ParseUniqueID(os.Getenv(envID))
	require.NoError(t, err)
	rank, err := strconv.Atoi(os.Getenv(envRank))
	require.NoError(t, err)
	n, err := strconv.Atoi(os.Getenv(envNRanks))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	c, err := Init(ctx, id, rank, n, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	all, err := c.AllGather(ctx, fmt.Appendf(nil, "r%d@%d", rank, os.Getpid()))
	require.NoError(t, err)
	blocks := make([]string, len(all))
	for i, b := range all {
		blocks[i] = string(b)
	}
	require.NoError(t, c.Send(ctx, (rank+1)%n, 7, fmt.Appendf(nil, "from%d", rank)))
	got, err := c.Recv(ctx, (rank+n-1)%n, 7)
	require.NoError(t, err)
	require.NoError(t, c.Barrier(ctx))
	fmt.Printf("RESULT rank=%d pid=%d allgather=%s ring=%s\n", rank, os.Getpid(), strings.Join(blocks, ","), got)
}
