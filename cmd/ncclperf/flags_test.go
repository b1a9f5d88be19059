package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/cli"
)

func TestLongOptions(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"--minbytes", "8", "--maxbytes=128M", "--stepfactor", "4", "--iters", "7",
		"--warmup_iters", "3", "--check", "0", "--op", "max", "--datatype", "bf16", "--root", "1", "--ngpus", "2", "--nthreads", "1"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, int64(8), c.minBytes)
	assert.Equal(t, int64(128<<20), c.maxBytes)
	assert.Equal(t, int64(4), c.factor)
	assert.Equal(t, 7, c.iters)
	assert.Equal(t, 3, c.warmup)
	assert.False(t, c.check)
	assert.Equal(t, []redOp{opMax}, c.ops)
	assert.Equal(t, []dataType{bfloat16T}, c.types)
	assert.Equal(t, 1, c.root)
	assert.Equal(t, 2, c.nRanks)
	assert.Equal(t, 1, c.cycles, "nccl-tests' default -N")
	assert.Equal(t, "c", c.refLoop, "NCCL's loop issued from C by default")

	c, err = parseFlags([]string{"-N3", "--stepbytes=1K", "-b", "1K", "-e", "4K"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []int64{1024, 2048, 3072, 4096}, c.sizes())
	assert.Equal(t, 3, c.cycles)
}

func TestShortAttached(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-b8", "-e1M", "-f4", "-g2", "-dhalf", "-oprod", "-n5", "-w0", "-c0", "-r1"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, int64(8), c.minBytes)
	assert.Equal(t, int64(1<<20), c.maxBytes)
	assert.Equal(t, int64(4), c.factor)
	assert.Equal(t, 2, c.nRanks)
	assert.Equal(t, float16T, c.dt)
	assert.Equal(t, opProd, c.op)
	assert.Equal(t, 5, c.iters)
	assert.Equal(t, 0, c.warmup)
	assert.False(t, c.check)
	assert.Equal(t, 1, c.root)
}

func TestOwnFlagsKeepWorking(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-coll", "broadcast", "-compare", "libnccl.so.2", "-hosttime", "-cpuprofile", "p.prof",
		"-check-max", "1M", "-g", "2", "-devices", "1,0", "-fatbin", "x.fatbin", "-ncclgo=false", "-c", "1", "-p2p-channels", "16"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []coll{collBroadcast}, c.colls)
	assert.Equal(t, "libnccl.so.2", c.compare)
	assert.True(t, c.hostTime)
	assert.Equal(t, "p.prof", c.cpuProfile)
	assert.Equal(t, int64(1<<20), c.checkMax)
	assert.Equal(t, []int{1, 0}, c.devices)
	assert.Equal(t, "x.fatbin", c.fatbin)
	assert.Equal(t, 16, c.p2pPerPeer)
	assert.False(t, c.ncclgo)
	assert.True(t, c.check)

	// Double dashes work for them too.
	c, err = parseFlags([]string{"--coll=allgather", "--hosttime"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []coll{collAllGather}, c.colls)
	assert.True(t, c.hostTime)
	assert.True(t, c.ncclgo, "ncclgo runs by default")
}

func TestAllTypesAndOps(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseFlags([]string{"-coll", "all", "-d", "all", "-o", "ALL"}, &errb)
	require.NoError(t, err)
	assert.Len(t, c.types, len(typeNames))
	assert.Len(t, c.ops, len(opNames))
	js := c.jobs()
	nt, no := len(typeNames), len(opNames)
	// AllReduce and ReduceScatter take every op; AllGather and Broadcast none.
	assert.Len(t, js, 2*nt*no+2*nt)
	assert.Equal(t, job{collAllReduce, dataType(0), redOp(0)}, js[0])
	assert.Equal(t, job{collAllReduce, dataType(0), redOp(1)}, js[1])
	assert.Equal(t, job{collAllGather, dataType(1), redOp(0)}, js[nt*no+1])

	c, err = parseFlags([]string{"-coll", "allgather", "-o", "all"}, &errb)
	require.NoError(t, err)
	assert.Len(t, c.jobs(), 1, "-o all does not multiply a collective without an op")
}

func TestPositionalRejected(t *testing.T) {
	var errb bytes.Buffer
	for _, args := range [][]string{{"allreduce", "-b", "8"}, {"-b", "8", "extra"}, {"-b", "8", "--", "-e", "16"}} {
		_, err := parseFlags(args, &errb)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), "unexpected argument", args)
		assert.Contains(t, err.Error(), "takes only flags", args)
	}
}

func TestFlagErrors(t *testing.T) {
	var errb bytes.Buffer
	for want, args := range map[string][]string{
		// The type and op lists come from data.go; ", or all" is added here.
		`"float128"`:                             {"--datatype", "float128"},
		"float, ":                                {"-d", "float128"},
		", or all":                               {"-d", "fp32"},
		`-o "xor"`:                               {"--op", "xor"},
		"avg, or all":                            {"-o", "xor"},
		"-t/--nthreads 2: ncclperf issues":       {"-t", "2"},
		"-n/--iters 0: want at least 1":          {"--iters", "0"},
		"-w/--warmup_iters -1: want 0 or more":   {"-w", "-1"},
		"-c/--check -1":                          {"-c", "-1"},
		"-g/--ngpus 0: want at least 1 rank":     {"--ngpus", "0"},
		`invalid argument "x" for "-g, --ngpus"`: {"--ngpus", "x"},
		`-e/--maxbytes "1T"`:                     {"--maxbytes", "1T"},
		"-ncclgo=false leaves nothing":           {"-ncclgo=false"},
		"unknown shorthand flag: 'z' in -zz":     {"-zz"},
		"unknown flag: --zz":                     {"--zz"},
		`-coll "gather": unknown collective`:     {"-coll", "gather"},
		"-p2p-channels -1: want 0":               {"-p2p-channels", "-1"},
		"-N/--run_cycles 0: want at least 1":     {"--run_cycles", "0"},
		`-ref-loop "cpp": want go or c`:          {"-ref-loop", "cpp"},
	} {
		_, err := parseFlags(args, &errb)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want, args)
	}
}

func TestUsage(t *testing.T) {
	var errb bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &errb)
	require.True(t, errors.Is(err, cli.ErrHelp))
	out := errb.String()
	for _, want := range []string{"-b, --minbytes size", "-w, --warmup_iters iterations", "-d, --datatype", "--coll collective", "--compare", "--ncclgo"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "\n  -minbytes", "long names are listed with their short flag, not alone")
}

// TestExitCodes: -h prints the usage on stdout and exits 0; usage errors
// exit 2 with the message on stderr; a failure of the work exits 1 (the
// convention of internal/cli, which ncclgen follows too).
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-h"}, cli.ExitOK, ""},
		{[]string{"--help"}, cli.ExitOK, ""},
		{[]string{"--bogus"}, cli.ExitUsage, "unknown flag: --bogus"},
		{[]string{"-b", "16", "-e", "8"}, cli.ExitUsage, "-e/--maxbytes 8 is below -b/--minbytes 16"},
		{[]string{"-coll", "gather"}, cli.ExitUsage, `-coll "gather": unknown collective`},
		{[]string{"-n", "x"}, cli.ExitUsage, `invalid argument "x"`},
		{[]string{"stray"}, cli.ExitUsage, `unexpected argument "stray"`},
		{[]string{"-cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir")}, cli.ExitFailure, "-cpuprofile: "},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), envMain+"=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%q: %v", tc.args, err)
		}
		assert.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "%q: %s", tc.args, errb.String())
		if tc.msg == "" {
			assert.True(t, strings.HasPrefix(out.String(), "Usage: ncclperf [flags]"), "%q: usage on stdout", tc.args)
			assert.Empty(t, errb.String(), "%q", tc.args)
			continue
		}
		assert.Empty(t, out.String(), "%q", tc.args)
		assert.Contains(t, errb.String(), "ncclperf: "+tc.msg, "%q", tc.args)
	}
}
