package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ncclgo/ncclgo/internal/cli"
	"github.com/ncclgo/ncclgo/internal/launch"
)

// Options follow internal/cli's convention, as ncclgen's do (pflag):
// nccl-tests' options are one-letter shorthands of their long names (-b,
// --minbytes), with getopt's attached values (-b8, -dfloat); ncclperf's own
// multi-letter flags are long options that may be written with one dash
// (-coll, --coll). -h prints the usage on stdout; a usage error exits 2.

// longNames maps each one-letter flag to nccl-tests' long name for it.
var longNames = map[string]string{
	"b": "minbytes",
	"e": "maxbytes",
	"i": "stepbytes",
	"f": "stepfactor",
	"n": "iters",
	"w": "warmup_iters",
	"c": "check",
	"o": "op",
	"d": "datatype",
	"r": "root",
	"g": "ngpus",
	"t": "nthreads",
	"a": "average",
	"N": "run_cycles",
	"G": "cudagraph",
	"R": "local_register",
	"T": "timeout",
}

// flagName is how errors name a flag: "-b/--minbytes", or "-coll".
func flagName(short string) string {
	if l, ok := longNames[short]; ok {
		return "-" + short + "/--" + l
	}
	return "-" + short
}

// reduces reports whether c takes a reduction op (-o all sweeps only these).
func (c coll) reduces() bool {
	return c == collAllReduce || c == collReduceScatter || c == collReduce
}

// parseSize reads a byte count like 8, 64K, 128M or 1G (binary units, as
// nccl-tests reads them).
func parseSize(flagName, s string) (int64, error) {
	mult := int64(1)
	t := strings.ToUpper(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s %q: want a byte count like 8, 64K, 128M or 1G", flagName, s)
	}
	return v * mult, nil
}

// parseFlags parses the flags of a process on its own.
func parseFlags(args []string, stdout io.Writer) (*config, error) {
	return parseArgs(args, stdout, nil)
}

// parseArgs parses ncclperf's flags for a process at place in a job that
// a launcher started (nil: a process on its own, which -np makes the
// launcher of its ranks). For -h it prints the usage on stdout and returns
// cli.ErrHelp; anything wrong with args it returns as a *cli.UsageError.
func parseArgs(args []string, stdout io.Writer, place *launch.Place) (*config, error) {
	c, err := parseConfig(args, stdout, place)
	return c, cli.Usage(err)
}

func parseConfig(args []string, stdout io.Writer, place *launch.Place) (*config, error) {
	fs := cli.NewFlagSet("ncclperf")
	c := &config{}
	var timeoutSec int
	collS := fs.String("coll", "allreduce", "`collective`: "+strings.Join(collNames, ", ")+", or all (allreduce, allgather, reducescatter, broadcast)")
	cmax := fs.String("check-max", "64M", "with -c 1, outputs up to this many `bytes` per rank are checked whole, larger ones on sampled windows")
	b := fs.StringP(longNames["b"], "b", "32M", "minimum `size` in bytes (8, 64K, 128M, 1G)")
	e := fs.StringP(longNames["e"], "e", "32M", "maximum `size` in bytes")
	f := fs.Int64P(longNames["f"], "f", 2, "multiplication `factor` between sizes")
	i := fs.StringP(longNames["i"], "i", "0", "increment between sizes in `bytes` (instead of -f)")
	fs.IntVarP(&c.nRanks, longNames["g"], "g", 1, "number of `ranks` (placed round-robin over the visible GPUs)")
	nThreads := fs.IntP(longNames["t"], "t", 1, "`threads` issuing the calls: only 1 (every rank's call in one group from one thread, as nccl-tests' -t 1 -g N)")
	devs := fs.String("devices", "", "comma-separated `list` of each rank's device (overrides round-robin)")
	fs.IntVar(&c.np, "np", 0, "run `N` processes of one rank each (ncclperf spawns itself; under mpirun or torchrun it is one rank of their job)")
	fs.IntVar(&c.hosts, "hosts", 0, "with -np, simulate `H` hosts: the ranks are split into H blocks of consecutive ranks, each block given its own NCCL_HOSTID (0 or 1: one host)")
	fs.IntVarP(&c.average, longNames["a"], "a", avgMean, "with ranks in several processes, the time reported: 0 rank 0's, 1 the mean, 2 the minimum, 3 the maximum over ranks (nccl-tests' -a; a `number`)")
	fs.IntVarP(&c.iters, longNames["n"], "n", 20, "timed `iterations` per size")
	fs.IntVarP(&c.cycles, longNames["N"], "N", 1, "run the whole sweep this many `cycles` after the one warm-up, printing each (nccl-tests' -N; 0, its endless run, is refused)")
	fs.IntVarP(&c.warmup, longNames["w"], "w", 1, "warm-up `iterations` at each size (all sizes are warmed up before the first is timed, as nccl-tests does; its default is 1 too)")
	chk := fs.IntP(longNames["c"], "c", 1, "check results: 0 does not, a `count` > 0 checks once per size")
	opS := fs.StringP(longNames["o"], "o", "sum", "reduction `op`: "+strings.Join(opNames, ", ")+", or all")
	dtS := fs.StringP(longNames["d"], "d", "float", "data `type`: "+strings.Join(typeNames, ", ")+", or all")
	fs.IntVarP(&c.root, longNames["r"], "r", 0, "`root` rank for broadcast and reduce")
	fs.StringVar(&c.compare, "compare", "", "`path` or soname of a NCCL library to run the same sweep through (e.g. libnccl.so.2)")
	fs.BoolVar(&c.ncclgo, "ncclgo", true, "run the sweep through ncclgo; -ncclgo=false with -compare times only the NCCL library, in nccl-tests' columns")
	fs.StringVar(&c.refLoop, "ref-loop", "c", "`where` -compare's library has its timed iterations issued from: c (all of them in one cgo call, as nccl-tests issues them from C) or go (one cgo call per iteration)")
	fs.BoolVar(&c.hostTime, "hosttime", false, "after each row, print the time per iteration spent enqueueing (before the final synchronize)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this `file`")
	fs.StringVar(&c.trace, "trace", "", "write a Go execution trace of the run to this `file` (go tool trace: where the issuing goroutine blocks or waits)")
	fs.StringVar(&c.fatbin, "fatbin", "", "ncclgo kernel image (`fatbin`; default: $NCCLGO_FATBIN, then build/ncclgo.fatbin)")
	fs.IntVarP(&c.register, longNames["R"], "R", 0, "register the buffers (nccl-tests' -R): 0 no, 1 ncclCommRegister (changes nothing in ncclgo), 2 as symmetric windows (Comm.RegisterWindow: with ranks in several processes on one GPU or NVLink, DIRECT runs on them); a `mode`")
	fs.IntVar(&c.p2pPerPeer, "p2p-channels", 0, "ncclgo: `channels` the point-to-point traffic between two ranks spreads over (Options.P2PChannelsPerPeer; 0: the default)")
	fs.IntVarP(&timeoutSec, longNames["T"], "T", 0, "give up when a size's streams are still busy this many `seconds` after its last call, naming the busy ranks (nccl-tests' -T; 0 waits for ever)")
	graphFlags(fs, c)
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, cli.ErrHelp) {
			fmt.Fprint(stdout, usage(fs))
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: ncclperf takes only flags (ncclperf -h lists them)", fs.Arg(0))
	}
	var err error
	if strings.EqualFold(*collS, "all") {
		c.colls = allColls
	} else {
		if c.coll, err = parseColl(*collS); err != nil {
			return nil, err
		}
		c.colls = []coll{c.coll}
	}
	if c.checkMax, err = parseSize("-check-max", *cmax); err != nil {
		return nil, err
	}
	if c.minBytes, err = parseSize(flagName("b"), *b); err != nil {
		return nil, err
	}
	if c.maxBytes, err = parseSize(flagName("e"), *e); err != nil {
		return nil, err
	}
	if c.step, err = parseSize(flagName("i"), *i); err != nil {
		return nil, err
	}
	c.factor = *f
	if c.maxBytes < c.minBytes {
		return nil, fmt.Errorf("%s %d is below %s %d", flagName("e"), c.maxBytes, flagName("b"), c.minBytes)
	}
	if c.step == 0 && c.factor < 2 {
		return nil, fmt.Errorf("%s %d: want a factor of at least 2 (or %s for a fixed increment)", flagName("f"), c.factor, flagName("i"))
	}
	if c.nRanks < 1 {
		return nil, fmt.Errorf("%s %d: want at least 1 rank", flagName("g"), c.nRanks)
	}
	if timeoutSec < 0 {
		return nil, fmt.Errorf("%s %d: want a number of seconds, or 0 to wait for ever", flagName("T"), timeoutSec)
	}
	c.timeout = time.Duration(timeoutSec) * time.Second
	if err := c.checkGraphFlags(place != nil); err != nil {
		return nil, err
	}
	if c.np < 0 {
		return nil, fmt.Errorf("-np %d: want a number of processes (one rank each), at least 1", c.np)
	}
	if c.np > 0 {
		if c.nRanks != 1 {
			return nil, fmt.Errorf("-np %d with %s %d: -np runs one rank per process, so %s must stay 1", c.np, flagName("g"), c.nRanks, flagName("g"))
		}
		c.nRanks = c.np
	}
	switch {
	case c.hosts < 0:
		return nil, fmt.Errorf("-hosts %d: want 0 or 1 (one host) or a number of fake hosts from 2 to -np's", c.hosts)
	case c.hosts >= 2 && c.np == 0:
		return nil, fmt.Errorf("-hosts %d without -np: the fake hosts are ncclperf's own children (set NCCL_HOSTID per process under another launcher)", c.hosts)
	case c.hosts > c.np && c.np > 0:
		return nil, fmt.Errorf("-hosts %d with -np %d: want at most one host per process, 0 to %d", c.hosts, c.np, c.np)
	}
	if place != nil {
		if c.np != 0 && c.np != place.Size {
			return nil, fmt.Errorf("-np %d, but %s started %d processes: leave -np out under %s", c.np, place.Launcher, place.Size, place.Launcher)
		}
		if c.nRanks != 1 && c.np == 0 {
			return nil, fmt.Errorf("%s %d under %s: each process of the job is one rank, so %s must stay 1", flagName("g"), c.nRanks, place.Launcher, flagName("g"))
		}
		c.nRanks, c.place = place.Size, place
	}
	if c.average < avgRank0 || c.average > avgMax {
		return nil, fmt.Errorf("%s %d: want 0 (rank 0), 1 (mean), 2 (minimum) or 3 (maximum)", flagName("a"), c.average)
	}
	if *nThreads != 1 {
		return nil, fmt.Errorf("%s %d: ncclperf issues every rank's call from one thread, in one group (nccl-tests' -t 1 -g N); set the rank count with %s", flagName("t"), *nThreads, flagName("g"))
	}
	if c.iters < 1 {
		return nil, fmt.Errorf("%s %d: want at least 1 timed iteration", flagName("n"), c.iters)
	}
	if c.cycles < 1 {
		return nil, fmt.Errorf("%s %d: want at least 1 cycle (ncclperf does not run endlessly)", flagName("N"), c.cycles)
	}
	if c.warmup < 0 {
		return nil, fmt.Errorf("%s %d: want 0 or more warm-up iterations", flagName("w"), c.warmup)
	}
	if *chk < 0 {
		return nil, fmt.Errorf("%s %d: want 0 (no check) or a positive count", flagName("c"), *chk)
	}
	if c.p2pPerPeer < 0 {
		return nil, fmt.Errorf("-p2p-channels %d: want 0 (ncclgo's default) or a positive channel count", c.p2pPerPeer)
	}
	c.check = *chk != 0
	if strings.EqualFold(*opS, "all") {
		for o := range opNames {
			c.ops = append(c.ops, redOp(o))
		}
	} else {
		op, err := parseOp(*opS)
		if err != nil {
			return nil, fmt.Errorf("%w, or all", err)
		}
		c.ops = []redOp{op}
	}
	if strings.EqualFold(*dtS, "all") {
		for t := range typeNames {
			c.types = append(c.types, dataType(t))
		}
	} else {
		dt, err := parseType(*dtS)
		if err != nil {
			return nil, fmt.Errorf("%w, or all", err)
		}
		c.types = []dataType{dt}
	}
	c.op, c.dt = c.ops[0], c.types[0]
	if c.root < 0 || c.root >= c.nRanks {
		return nil, fmt.Errorf("%s %d: want a root in [0, %d) for %d ranks", flagName("r"), c.root, c.nRanks, c.nRanks)
	}
	if *devs != "" {
		for _, s := range strings.Split(*devs, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("-devices %q: want comma-separated device ordinals", *devs)
			}
			c.devices = append(c.devices, d)
		}
		if len(c.devices) != c.nRanks {
			by := flagName("g")
			if c.np > 0 {
				by = "-np"
			}
			return nil, fmt.Errorf("-devices lists %d devices for %s %d ranks", len(c.devices), by, c.nRanks)
		}
	}
	if c.refLoop != "go" && c.refLoop != "c" {
		return nil, fmt.Errorf("-ref-loop %q: want go or c", c.refLoop)
	}
	if !c.ncclgo && c.compare == "" {
		return nil, fmt.Errorf("-ncclgo=false leaves nothing to measure: name a NCCL library with -compare")
	}
	return c, nil
}

// usage is ncclperf's usage: the flags, one-letter flags with their
// nccl-tests long name.
func usage(fs *pflag.FlagSet) string {
	return "Usage: ncclperf [flags]\n\n" +
		"nccl-tests' options are accepted as -b 8, -b8, --minbytes 8 or --minbytes=8; ncclperf's own\n" +
		"as --coll all or -coll all.\n\n" + fs.FlagUsages()
}
