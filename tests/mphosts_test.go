package tests

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/config"
)

// The fake-host plumbing of the multi-process tests, without a GPU.

func TestMultiProcessHostSplit(t *testing.T) {
	for _, tc := range []struct {
		procs, hosts int
		want         []int
	}{
		{4, 0, []int{0, 0, 0, 0}},
		{4, 1, []int{0, 0, 0, 0}},
		{2, 2, []int{0, 1}},
		{4, 2, []int{0, 0, 1, 1}},
		{6, 3, []int{0, 0, 1, 1, 2, 2}},
		{8, 4, []int{0, 0, 1, 1, 2, 2, 3, 3}},
		{4, 4, []int{0, 1, 2, 3}},
	} {
		l := mpLayout{nProcs: tc.procs, perProc: 1, hosts: tc.hosts}
		var got []int
		for p := range tc.procs {
			got = append(got, l.hostOf(p))
		}
		assert.Equal(t, tc.want, got, "%d processes on %d hosts", tc.procs, tc.hosts)
	}
	l := mpLayout{nProcs: 4, perProc: 1, hosts: 2}
	assert.Equal(t, []string{"NCCL_HOSTID=mp77-host1", mpEnvHostsOn + "=true"}, l.hostEnv(2, 77, ""))
	assert.Equal(t, []string{"NCCL_HOSTID=job-host0", mpEnvHostsOn + "=true"}, l.hostEnv(1, 77, "job"))
	assert.Nil(t, mpLayout{nProcs: 4, perProc: 1, hosts: 1}.hostEnv(1, 77, ""), "one host: the environment's")
}

func TestMultiProcessCaseFilter(t *testing.T) {
	cases := mpCases(4, true)
	all := mpFilter(cases, nil)
	assert.Len(t, all, len(cases))
	re := regexp.MustCompile(`^(AllReduce Sum|AllGather) Float32 count=(1|1001)$`)
	got := mpFilter(cases, re)
	var names []string
	for _, c := range got {
		names = append(names, c.what())
	}
	assert.Equal(t, []string{"AllReduce Sum Float32 count=1", "AllGather Float32 count=1",
		"AllReduce Sum Float32 count=1001", "AllGather Float32 count=1001"}, names)
	assert.Empty(t, mpFilter(cases, regexp.MustCompile(`^nothing$`)))
}

// mpFakeOutputs builds the children's outputs of a run of l: MPVIA lines
// for a ring over the ranks with the given transport per pair, the result
// lines, and MPSKIP lines for the skipped cases.
func mpFakeOutputs(l mpLayout, via func(from, to int) string, run []mpCase, skip func(c mpCase) string) []string {
	n := l.nRanks()
	outs := make([]string, l.nProcs)
	skipped := 0
	var skips strings.Builder
	for _, c := range run {
		if why := skip(c); why != "" {
			skipped++
			fmt.Fprintf(&skips, "MPSKIP case=%q err=%s\n", c.what(), why)
		}
	}
	for p := range l.nProcs {
		var b strings.Builder
		for r := l.first(p); r < l.first(p)+l.count(p); r++ {
			fmt.Fprintf(&b, "MPVIA from=%d to=%d via=%s\n", r, (r+1)%n, via(r, (r+1)%n))
		}
		b.WriteString(skips.String())
		for r := l.first(p); r < l.first(p)+l.count(p); r++ {
			fmt.Fprintf(&b, "%s rank=%d pid=%d cases=%d skipped=%d failed=0\n", mpResultLine, r, 100+p, len(run), skipped)
		}
		outs[p] = b.String()
	}
	return outs
}

func TestMultiProcessCheckHosts(t *testing.T) {
	sel := func(algo, proto string) mpSel {
		a, err := config.ParseAlgoSelection(algo)
		require.NoError(t, err)
		p, err := config.ParseProtoSelection(proto)
		require.NoError(t, err)
		return mpSel{algo: a, proto: p}
	}
	l := mpLayout{nProcs: 4, perProc: 1, hosts: 2} // hosts {0,1} {2,3}
	host := func(r int) int { return l.hostOf(r) }
	right := func(from, to int) string {
		if host(from) != host(to) {
			return "NET/Socket"
		}
		return "P2P/CUMEM"
	}
	run := mpFilter(mpCases(4, true), regexp.MustCompile(`Float32 count=1$`))
	none := func(mpCase) string { return "" }

	summary, err := mpCheckHosts(l, sel("", ""), run, mpFakeOutputs(l, right, run, none))
	require.NoError(t, err)
	assert.Contains(t, summary, "NET/Socket×2")
	assert.Contains(t, summary, "P2P/CUMEM×2")

	// NET inside a host, P2P across hosts: both wrong.
	_, err = mpCheckHosts(l, sel("", ""), run, mpFakeOutputs(l, func(int, int) string { return "NET/Socket" }, run, none))
	assert.ErrorContains(t, err, "want P2P or SHM inside a host")
	_, err = mpCheckHosts(l, sel("", ""), run, mpFakeOutputs(l, func(int, int) string { return "SHM" }, run, none))
	assert.ErrorContains(t, err, "want NET across hosts")

	// Two ranks per host but no connection inside a host reported.
	l1 := mpLayout{nProcs: 2, perProc: 2, hosts: 2}
	outs := mpFakeOutputs(l1, func(int, int) string { return "NET/Socket" }, run, none)
	for p := range outs {
		outs[p] = strings.ReplaceAll(outs[p], fmt.Sprintf("MPVIA from=%d to=%d via=NET/Socket\n", 2*p, 2*p+1), "")
	}
	_, err = mpCheckHosts(l1, sel("", ""), run, outs)
	assert.ErrorContains(t, err, "no connection inside a host")
	// Uneven: process 0 has ranks 0 and 1 (host 0), process 1 rank 2
	// (host 1); P2P inside process 0, NET to and from rank 2.
	lu := mpLayout{nProcs: 2, counts: []int{2, 1}, hosts: 2}
	uhost := func(r int) int { return lu.hostOf(lu.procOf(r)) }
	urun := mpFilter(mpCases(3, true), regexp.MustCompile(`Float32 count=1$`))
	summary, err = mpCheckHosts(lu, sel("", ""), urun, mpFakeOutputs(lu, func(from, to int) string {
		if uhost(from) != uhost(to) {
			return "NET/Socket"
		}
		return "P2P/direct"
	}, urun, none))
	require.NoError(t, err)
	assert.Contains(t, summary, "NET/Socket×2")
	assert.Contains(t, summary, "P2P/direct×1")

	// TREE forced: only AllReduce (and Send/Recv) run; the rest are skipped
	// with tune.ErrNoChoice: fine.
	tree := func(c mpCase) string {
		if strings.HasPrefix(c.name, "AllReduce") || strings.HasPrefix(c.name, "SendRecv") {
			return ""
		}
		return "tune: no algorithm and protocol to run: NCCL_ALGO=TREE leaves no algorithm for " + c.name
	}
	_, err = mpCheckHosts(l, sel("TREE", ""), run, mpFakeOutputs(l, right, run, tree))
	require.NoError(t, err)
	// A skip for another reason fails.
	_, err = mpCheckHosts(l, sel("", ""), run, mpFakeOutputs(l, right, run, func(c mpCase) string {
		if c.name == "Broadcast" {
			return "launch failed"
		}
		return ""
	}))
	assert.ErrorContains(t, err, "other than tune.ErrNoChoice")
	// Everything skipped without LL128 forced: the case list ran nothing.
	_, err = mpCheckHosts(l, sel("TREE", ""), run, mpFakeOutputs(l, right, run, func(c mpCase) string {
		return "tune: no algorithm and protocol to run: x"
	}))
	assert.ErrorContains(t, err, "cases skipped")

	// LL128 forced: every collective refused naming LL128, Send/Recv runs.
	ll128 := func(c mpCase) string {
		if strings.HasPrefix(c.name, "SendRecv") {
			return ""
		}
		return "tune: no algorithm and protocol to run: NCCL_PROTO=LL128 leaves no protocol for " + c.name
	}
	summary, err = mpCheckHosts(l, sel("", "LL128"), run, mpFakeOutputs(l, right, run, ll128))
	require.NoError(t, err)
	assert.Contains(t, summary, "LL128 forced")
	// ... and a collective that ran under forced LL128 is an error.
	_, err = mpCheckHosts(l, sel("", "LL128"), run, mpFakeOutputs(l, right, run, func(c mpCase) string {
		if c.name == "Broadcast" {
			return ""
		}
		return ll128(c)
	}))
	assert.ErrorContains(t, err, "want the")

	// PAT forced: pointless only where the build has none.
	if kspace.Implemented(kspace.AllGather, kspace.PAT) && kspace.Implemented(kspace.ReduceScatter, kspace.PAT) {
		assert.Empty(t, sel("PAT", "").patMissing())
	} else {
		assert.Contains(t, sel("PAT", "").patMissing(), "PAT")
	}
	assert.Empty(t, sel("RING", "").patMissing())
	assert.True(t, sel("", "LL128").ll128Only())
	assert.False(t, sel("", "LL128,Simple").ll128Only())
	assert.False(t, sel("", "").ll128Only())
}

func TestMultiProcessRanksPerProc(t *testing.T) {
	l, err := mpRanksPerProc("", "")
	require.NoError(t, err)
	assert.Equal(t, 2, l.nProcs)
	assert.Equal(t, 2, l.nRanks())
	l, err = mpRanksPerProc("2", "3")
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2, 4}, []int{l.first(0), l.first(1), l.first(2)})
	assert.Equal(t, 6, l.nRanks())
	assert.Equal(t, 2, l.procOf(5))
	assert.Equal(t, "2", l.ranksDesc())
	l, err = mpRanksPerProc("1, 2,1", "")
	require.NoError(t, err)
	assert.Equal(t, 3, l.nProcs)
	assert.Equal(t, []int{0, 1, 3}, []int{l.first(0), l.first(1), l.first(2)})
	assert.Equal(t, []int{0, 1, 1, 2}, []int{l.procOf(0), l.procOf(1), l.procOf(2), l.procOf(3)})
	assert.Equal(t, 4, l.nRanks())
	assert.Equal(t, "1,2,1", l.ranksDesc())
	_, err = mpRanksPerProc("2,1", "3")
	assert.ErrorContains(t, err, `NCCLGO_MP_RANKS_PER_PROC="2,1" gives 2 processes, NCCLGO_MP_NPROCS=3`)
	_, err = mpRanksPerProc("2,0", "")
	assert.ErrorContains(t, err, "want ranks per process (at least 1)")
	_, err = mpRanksPerProc("", "zero")
	assert.ErrorContains(t, err, `NCCLGO_MP_NPROCS="zero"`)
}

// TestViaLogBuffers: the child's log handler turns the engine's buffer
// line into an MPBUFS line naming the rank its logger is bound to, and
// mpCheckHosts's summary reports the most any rank set up.
func TestViaLogBuffers(t *testing.T) {
	v := newViaLog("")
	slog.New(v).With("rank", 3).Info("connected 12 edges, 345 MiB of buffers", "subsys", "INIT")
	slog.New(v).Info("connected 1 edges, 9 MiB of buffers") // no rank bound: not a rank's line
	require.Equal(t, []string{"MPBUFS rank=3 edges=12 mib=345"}, v.st.lines)

	l := mpLayout{nProcs: 2, perProc: 1, hosts: 2}
	run := mpFilter(mpCases(2, true), regexp.MustCompile(`Float32 count=1$`))
	outs := mpFakeOutputs(l, func(int, int) string { return "NET/Socket" }, run, func(mpCase) string { return "" })
	outs[0] += "MPBUFS rank=0 edges=16 mib=68\n"
	outs[1] += "MPBUFS rank=1 edges=16 mib=70\n"
	summary, err := mpCheckHosts(l, mpSel{}, run, outs)
	require.NoError(t, err)
	assert.Contains(t, summary, "buffers≤70MiB/rank")
}
