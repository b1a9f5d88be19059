// Command ncclperf measures ncclgo's collectives with nccl-tests' flags and
// columns, and can run the same sweep through a real NCCL library in the same
// run (-compare) to print the ratio.
//
//	ncclperf -coll allreduce -b 8 -e 512M -f 2 -g 2 [-compare libnccl.so.2]
//
// Ranks are placed round-robin over the visible GPUs unless -devices lists
// them, so -g 4 on a one-GPU machine puts four ranks on that GPU and -g 8
// on an eight-GPU machine one rank on each. -coll all sweeps AllReduce,
// AllGather, ReduceScatter and Broadcast in turn, one table each, with one
// initialisation of each library.
//
// With -compare, the last columns are the reference library's out-of-place
// time and busbw and the ratio, > 1 when ncclgo is better: below
// ratioSplit (64 KiB, the size column) it is NCCL's time over ncclgo's
// (latency), from there ncclgo's busbw over NCCL's (both out-of-place); the
// "by" column says which.
//
// Checking (-c 1) stays cheap at any size: inputs are periodic, so each
// rank uploads at most fillChunk elements and the device replicates them;
// outputs up to -check-max bytes per rank are checked whole, larger ones on
// sampled windows (evenly spread, plus the rank-chunk boundaries of
// AllGather).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// coll is a collective ncclperf can sweep.
type coll int

const (
	collAllReduce coll = iota
	collAllGather
	collReduceScatter
	collBroadcast
	collReduce
	collSendRecv // each rank sends to the next and receives from the previous (nccl-tests' sendrecv)
	collAllToAll // count elements to and from every rank (nccl-tests' alltoall)
)

var collNames = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv", "alltoall"}

// p2p reports whether c is made of sends and receives, which have no
// in-place form.
func (c coll) p2p() bool { return c == collSendRecv || c == collAllToAll }

// allColls is what -coll all sweeps.
var allColls = []coll{collAllReduce, collAllGather, collReduceScatter, collBroadcast}

// ratioSplit is the size from which the ratio compares busbw rather than
// time.
const ratioSplit = 64 << 10

func (c coll) String() string { return collNames[c] }

func parseColl(s string) (coll, error) {
	norm := strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	for i, n := range collNames {
		if n == norm {
			return coll(i), nil
		}
	}
	return 0, fmt.Errorf("-coll %q: unknown collective; valid are %s", s, strings.Join(collNames, ", "))
}

// busFactor converts algorithm bandwidth to bus bandwidth, as nccl-tests does.
func (c coll) busFactor(n int) float64 {
	switch c {
	case collAllReduce:
		return 2 * float64(n-1) / float64(n)
	case collAllGather, collReduceScatter, collAllToAll:
		return float64(n-1) / float64(n)
	}
	return 1
}

// backend runs one collective on every rank, as one group, on streams[r].
type backend interface {
	Name() string
	Run(c coll, send, recv []cuda.DevicePtr, count int, dt dataType, op redOp, root int, streams []*cuda.Stream) error
	Close() error
}

type config struct {
	coll            coll
	colls           []coll // the sweeps to run (-coll all: allColls)
	checkMax        int64  // bytes of one rank's output checked whole
	minBytes        int64
	maxBytes        int64
	factor          int64
	step            int64
	nRanks          int
	devices         []int
	iters, warmup   int
	check           bool
	op              redOp
	dt              dataType
	root            int
	hostTime        bool   // -hosttime: report the enqueue loop's own time
	cpuProfile      string // -cpuprofile: write a Go CPU profile here
	compare, fatbin string
}

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
		return 0, fmt.Errorf("-%s %q: want a byte count like 8, 64K, 128M or 1G", flagName, s)
	}
	return v * mult, nil
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("ncclperf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	collS := fs.String("coll", "allreduce", "collective: "+strings.Join(collNames, ", ")+", or all (allreduce, allgather, reducescatter, broadcast)")
	cmax := fs.String("check-max", "64M", "with -c 1, outputs up to this many bytes per rank are checked whole, larger ones on sampled windows")
	b := fs.String("b", "32M", "minimum size in bytes")
	e := fs.String("e", "32M", "maximum size in bytes")
	f := fs.Int64("f", 2, "multiplication factor between sizes")
	i := fs.String("i", "0", "increment between sizes (instead of -f)")
	fs.IntVar(&c.nRanks, "g", 1, "number of ranks (placed round-robin over the visible GPUs)")
	devs := fs.String("devices", "", "comma-separated device of each rank (overrides round-robin)")
	fs.IntVar(&c.iters, "n", 20, "timed iterations per size")
	fs.IntVar(&c.warmup, "w", 5, "warm-up iterations per size")
	chk := fs.Int("c", 1, "check results (0 or 1)")
	opS := fs.String("o", "sum", "reduction op: "+strings.Join(opNames, ", "))
	dtS := fs.String("d", "float", "data type: "+strings.Join(typeNames, ", "))
	fs.IntVar(&c.root, "r", 0, "root rank for broadcast and reduce")
	fs.StringVar(&c.compare, "compare", "", "path or soname of a NCCL library to run the same sweep through (e.g. libnccl.so.2)")
	fs.BoolVar(&c.hostTime, "hosttime", false, "after each row, print the time per iteration spent enqueueing (before the final synchronize)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	fs.StringVar(&c.fatbin, "fatbin", "", "ncclgo fatbin (default: $NCCLGO_FATBIN, then build/ncclgo.fatbin)")
	if err := fs.Parse(args); err != nil {
		return nil, err
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
	if c.checkMax, err = parseSize("check-max", *cmax); err != nil {
		return nil, err
	}
	if c.minBytes, err = parseSize("b", *b); err != nil {
		return nil, err
	}
	if c.maxBytes, err = parseSize("e", *e); err != nil {
		return nil, err
	}
	if c.step, err = parseSize("i", *i); err != nil {
		return nil, err
	}
	c.factor = *f
	if c.maxBytes < c.minBytes {
		return nil, fmt.Errorf("-e %d is below -b %d", c.maxBytes, c.minBytes)
	}
	if c.step == 0 && c.factor < 2 {
		return nil, fmt.Errorf("-f %d: want a factor of at least 2 (or -i for a fixed increment)", c.factor)
	}
	if c.nRanks < 1 {
		return nil, fmt.Errorf("-g %d: want at least 1 rank", c.nRanks)
	}
	if c.iters < 1 || c.warmup < 0 {
		return nil, fmt.Errorf("-n %d -w %d: want n >= 1 and w >= 0", c.iters, c.warmup)
	}
	c.check = *chk != 0
	if c.op, err = parseOp(*opS); err != nil {
		return nil, err
	}
	if c.dt, err = parseType(*dtS); err != nil {
		return nil, err
	}
	if c.root < 0 || c.root >= c.nRanks {
		return nil, fmt.Errorf("-r %d: want a root in [0, %d)", c.root, c.nRanks)
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
			return nil, fmt.Errorf("-devices lists %d devices for -g %d ranks", len(c.devices), c.nRanks)
		}
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "ncclperf:", err)
		os.Exit(2)
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ncclperf: -cpuprofile:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "ncclperf: -cpuprofile:", err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(c, os.Stdout); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "ncclperf:", err)
		os.Exit(1)
	}
}

// rankBuffers are one rank's device buffers and stream.
type rankBuffers struct {
	ctx        *cuda.Context
	send, recv cuda.DevicePtr
	stream     *cuda.Stream
}

func run(c *config, w io.Writer) error {
	if err := cuda.Init(); err != nil {
		return err
	}
	if c.devices == nil {
		n, err := cuda.DeviceCount()
		if err != nil {
			return err
		}
		c.devices = placeRanks(c.nRanks, n)
	}
	ranks := make([]rankBuffers, c.nRanks)
	var sendBytes, recvBytes int64
	for _, k := range c.colls {
		cc := *c
		cc.coll = k
		s, r := cc.bufferBytes(c.maxBytes)
		sendBytes, recvBytes = max(sendBytes, s), max(recvBytes, r)
	}
	for r := range ranks {
		dev, err := cuda.GetDevice(c.devices[r])
		if err != nil {
			return err
		}
		if ranks[r].ctx, err = dev.PrimaryContext(); err != nil {
			return err
		}
		if ranks[r].send, err = ranks[r].ctx.MemAlloc(uint64(max(sendBytes, 16))); err != nil {
			return err
		}
		if ranks[r].recv, err = ranks[r].ctx.MemAlloc(uint64(max(recvBytes, 16))); err != nil {
			return err
		}
		if ranks[r].stream, err = ranks[r].ctx.NewStream(true); err != nil {
			return err
		}
	}
	defer func() {
		for _, rb := range ranks {
			rb.stream.Destroy()
			rb.ctx.MemFree(rb.send)
			rb.ctx.MemFree(rb.recv)
			rb.ctx.Release()
		}
	}()

	ours, err := openNcclgo(c)
	if err != nil {
		return err
	}
	defer ours.Close()
	var ref backend
	if c.compare != "" {
		nb, err := openNCCL(c.compare, c.devices)
		if err != nil {
			return err
		}
		defer nb.Close()
		ref = nb
	}

	var errs []error
	for i, k := range c.colls {
		if i > 0 {
			fmt.Fprintln(w)
		}
		cc := *c
		cc.coll = k
		if err := cc.sweep(w, ranks, ours, ref); err != nil {
			if len(c.colls) == 1 {
				return err
			}
			fmt.Fprintf(w, "# %s: %v\n", k, err)
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// placeRanks puts n ranks round-robin on the visible GPUs: one rank per GPU
// when n does not exceed them.
func placeRanks(n, visible int) []int {
	devs := make([]int, n)
	for r := range devs {
		devs[r] = r % max(visible, 1)
	}
	return devs
}

// ratio compares ncclgo's out-of-place result with the reference's at a
// size (bytes of the size column): > 1 when ncclgo is better. Below
// ratioSplit it is the reference's time over ncclgo's, from there ncclgo's
// busbw over the reference's.
func ratio(size int64, oursUsec, oursBus, refUsec, refBus float64) (float64, string) {
	if size < ratioSplit || oursBus == 0 || refBus == 0 {
		if oursUsec == 0 {
			return math.NaN(), "time"
		}
		return refUsec / oursUsec, "time"
	}
	return oursBus / refBus, "busbw"
}

// sweep measures c.coll at every size and prints its table.
func (c *config) sweep(w io.Writer, ranks []rankBuffers, ours, ref backend) error {
	fmt.Fprintf(w, "# ncclperf: %s, %d ranks on devices %v, %s %s, -n %d -w %d\n", c.coll, c.nRanks, c.devices, c.dt, c.op, c.iters, c.warmup)
	fmt.Fprintf(w, "# ncclgo: %s\n", ours.Name())
	if ref != nil {
		fmt.Fprintf(w, "# reference: %s (%s)\n", ref.Name(), c.compare)
		fmt.Fprintf(w, "# ratio (> 1: ncclgo better, out-of-place): below %d B NCCL time / ncclgo time, from %d B ncclgo busbw / NCCL busbw\n",
			ratioSplit, ratioSplit)
	}
	if c.check {
		fmt.Fprintf(w, "# check: whole outputs up to %d B per rank, sampled windows above\n", c.checkMax)
	}
	hdr := fmt.Sprintf("#%11s %12s %8s %6s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s", "size", "count", "type", "redop", "root",
		"time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	units := fmt.Sprintf("#%11s %12s %8s %6s %6s   %9s %7s %7s %6s   %9s %7s %7s %6s", "(B)", "(elements)", "", "", "",
		"(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	if ref != nil {
		hdr += fmt.Sprintf("   %9s %7s %7s %5s", "nccl(us)", "busbw", "ratio", "by")
		units += fmt.Sprintf("   %9s %7s %7s %5s", "oop", "(GB/s)", "(>1 ok)", "")
	}
	fmt.Fprintf(w, "#%s\n%s\n%s\n", strings.Repeat(" ", 10)+"out-of-place / in-place", hdr, units)
	totalWrong := 0
	var busSum float64
	var nSizes int
	for size := c.minBytes; size <= c.maxBytes; size = c.next(size) {
		count := c.countFor(size)
		bytes := count * int64(c.dt.size()) * c.elemsPerCount()
		row := fmt.Sprintf("%12d %12d %8s %6s %6d", bytes, count, c.dt, c.op, c.root)
		var oopBus, oopTime, oopHost float64
		var refHost string // the reference's enqueue time, for -hosttime
		for _, inPlace := range []bool{false, true} {
			if inPlace && c.coll.p2p() {
				row += fmt.Sprintf("   %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A")
				continue
			}
			res, err := c.measure(ours, ranks, count, inPlace)
			if err != nil {
				return fmt.Errorf("size %d, in-place %v: %w", size, inPlace, err)
			}
			totalWrong += res.wrong
			wrong := strconv.Itoa(res.wrong)
			if !c.check {
				wrong = "N/A"
			}
			row += fmt.Sprintf("   %9.2f %7.2f %7.2f %6s", res.usec, res.algbw, res.busbw, wrong)
			if !inPlace {
				oopBus, oopTime, oopHost = res.busbw, res.usec, res.hostUsec
			}
		}
		busSum += oopBus
		nSizes++
		if ref != nil {
			res, err := c.measure(ref, ranks, count, false)
			if err != nil {
				return fmt.Errorf("reference, size %d: %w", size, err)
			}
			q, by := ratio(bytes, oopTime, oopBus, res.usec, res.busbw)
			row += fmt.Sprintf("   %9.2f %7.2f %7.3f %5s", res.usec, res.busbw, q, by)
			refHost = fmt.Sprintf(", reference %.2f", res.hostUsec)
		}
		if c.hostTime {
			row += fmt.Sprintf("\n#%11d host enqueue (us/iter): ncclgo %.2f%s", bytes, oopHost, refHost)
		}
		fmt.Fprintln(w, row)
		if c.next(size) == size {
			break
		}
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", totalWrong, map[bool]string{true: "OK", false: "FAILED"}[totalWrong == 0])
	fmt.Fprintf(w, "# Avg bus bandwidth    : %g\n", busSum/float64(max(nSizes, 1)))
	if totalWrong > 0 {
		return fmt.Errorf("%d wrong values", totalWrong)
	}
	return nil
}

func (c *config) next(size int64) int64 {
	if c.step > 0 {
		return size + c.step
	}
	if size == 0 {
		return 1
	}
	return size * c.factor
}

// elemsPerCount is how many counts one "size" covers: nccl-tests sizes
// allgather, reducescatter and alltoall by the whole buffer, nRanks chunks
// of count.
func (c *config) elemsPerCount() int64 {
	if c.coll == collAllGather || c.coll == collReduceScatter || c.coll == collAllToAll {
		return int64(c.nRanks)
	}
	return 1
}

// countFor is the count argument of the collective for a size in bytes.
func (c *config) countFor(size int64) int64 {
	return size / int64(c.dt.size()) / c.elemsPerCount()
}

// bufferBytes is what each rank's send and receive buffers need for size.
func (c *config) bufferBytes(size int64) (send, recv int64) {
	count := c.countFor(size) * int64(c.dt.size())
	switch c.coll {
	case collAllGather:
		return count, count * int64(c.nRanks)
	case collReduceScatter:
		return count * int64(c.nRanks), count
	case collAllToAll:
		return count * int64(c.nRanks), count * int64(c.nRanks)
	}
	return count, count
}

type result struct {
	usec, algbw, busbw float64
	hostUsec           float64 // the enqueue loop alone, per iteration
	wrong              int
}

func (c *config) buffers(ranks []rankBuffers, count int64, inPlace bool) (send, recv []cuda.DevicePtr) {
	ts := int64(c.dt.size())
	for r, rb := range ranks {
		s, d := rb.send, rb.recv
		if inPlace {
			switch c.coll {
			case collAllGather:
				s = d + cuda.DevicePtr(int64(r)*count*ts)
			case collReduceScatter:
				d = s + cuda.DevicePtr(int64(r)*count*ts)
			default:
				s = d
			}
		}
		send, recv = append(send, s), append(recv, d)
	}
	return send, recv
}

func (c *config) measure(b backend, ranks []rankBuffers, count int64, inPlace bool) (result, error) {
	send, recv := c.buffers(ranks, count, inPlace)
	streams := make([]*cuda.Stream, len(ranks))
	for r := range ranks {
		streams[r] = ranks[r].stream
	}
	var res result
	if c.check {
		if err := c.fill(ranks, send, count); err != nil {
			return res, err
		}
		if err := b.Run(c.coll, send, recv, int(count), c.dt, c.op, c.root, streams); err != nil {
			return res, err
		}
		if err := syncAll(streams); err != nil {
			return res, err
		}
		wrong, err := c.verify(ranks, recv, count)
		if err != nil {
			return res, err
		}
		res.wrong = wrong
	}
	for range c.warmup {
		if err := b.Run(c.coll, send, recv, int(count), c.dt, c.op, c.root, streams); err != nil {
			return res, err
		}
	}
	if err := syncAll(streams); err != nil {
		return res, err
	}
	start := time.Now()
	for range c.iters {
		if err := b.Run(c.coll, send, recv, int(count), c.dt, c.op, c.root, streams); err != nil {
			return res, err
		}
	}
	res.hostUsec = time.Since(start).Seconds() * 1e6 / float64(c.iters)
	if err := syncAll(streams); err != nil {
		return res, err
	}
	sec := time.Since(start).Seconds() / float64(c.iters)
	bytes := float64(count * int64(c.dt.size()) * c.elemsPerCount())
	res.usec = sec * 1e6
	res.algbw = bytes / sec / 1e9
	res.busbw = res.algbw * c.coll.busFactor(len(ranks))
	return res, nil
}

func syncAll(streams []*cuda.Stream) error {
	for _, s := range streams {
		if err := s.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// sendCount is the number of elements each rank sends.
func (c *config) sendCount(count int64) int64 {
	if c.coll == collReduceScatter || c.coll == collAllToAll {
		return count * int64(c.nRanks)
	}
	return count
}

// fillChunk is the most elements of one rank's input that the host encodes
// and uploads; fillValue is periodic over it.
const fillChunk = 6 << 16

// fill writes every rank's input: fillValue is periodic in i (period fillChunk), so
// the host uploads at most fillChunk elements and the device doubles them
// to the full count.
func (c *config) fill(ranks []rankBuffers, send []cuda.DevicePtr, count int64) error {
	n := c.sendCount(count)
	if n == 0 {
		return nil
	}
	ts := int64(c.dt.size())
	for r, rb := range ranks {
		first := min(n, fillChunk)
		vals := make([]float64, first)
		for i := range vals {
			vals[i] = fillValue(r, i, c.op)
		}
		b := encode(c.dt, vals)
		if err := rb.ctx.MemcpyHtoD(send[r], unsafe.Pointer(&b[0]), uint64(len(b))); err != nil {
			return err
		}
		for have := first; have < n; {
			k := min(have, n-have)
			if err := rb.ctx.MemcpyDtoD(send[r]+cuda.DevicePtr(have*ts), send[r], uint64(k*ts)); err != nil {
				return err
			}
			have += k
		}
		// Device-to-device copies do not wait for the host: finish them
		// before the collective's streams read the buffer.
		if err := rb.ctx.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// checkWindows are the element ranges of an output of n elements that the
// check reads: all of it up to maxElems, else sampleWindows windows of
// windowElems spread evenly, plus windows around each of the boundaries
// (chunk boundaries of AllGather's output).
func checkWindows(n, maxElems int64, boundaries []int64) [][2]int64 {
	if n <= maxElems {
		return [][2]int64{{0, n}}
	}
	const sampleWindows, windowElems = 33, 1 << 16
	var starts []int64
	for i := range int64(sampleWindows) {
		starts = append(starts, i*(n-windowElems)/(sampleWindows-1))
	}
	for _, b := range boundaries {
		starts = append(starts, min(max(b-windowElems/2, 0), n-windowElems))
	}
	slices.Sort(starts)
	var out [][2]int64
	for _, st := range starts {
		end := st + windowElems
		if k := len(out); k > 0 && st <= out[k-1][1] {
			out[k-1][1] = max(out[k-1][1], end)
			continue
		}
		out = append(out, [2]int64{st, end})
	}
	return out
}

// reduceAt reduces element i of every rank's send buffer.
func (c *config) reduceAt(i int) float64 {
	n := c.nRanks
	acc := fillValue(0, i, c.op)
	for r := 1; r < n; r++ {
		v := fillValue(r, i, c.op)
		switch c.op {
		case opSum, opAvg:
			acc += v
		case opProd:
			acc *= v
		case opMax:
			acc = math.Max(acc, v)
		case opMin:
			acc = math.Min(acc, v)
		}
	}
	if c.op == opAvg {
		acc /= float64(n)
		if !c.dt.isFloat() {
			acc = math.Floor(acc)
		}
	}
	return acc
}

func (c *config) verify(ranks []rankBuffers, recv []cuda.DevicePtr, count int64) (int, error) {
	ts := int64(c.dt.size())
	wrong := 0
	rounded := map[float64]float64{} // want → want in c.dt
	for r, rb := range ranks {
		n := count
		var bounds []int64
		if c.coll == collAllGather || c.coll == collAllToAll {
			n = count * int64(c.nRanks)
			for k := 1; k < c.nRanks; k++ {
				bounds = append(bounds, int64(k)*count)
			}
		}
		if c.coll == collReduce && r != c.root {
			continue
		}
		if n == 0 {
			continue
		}
		for _, win := range checkWindows(n, max(c.checkMax/ts, 1), bounds) {
			b := make([]byte, (win[1]-win[0])*ts)
			if err := rb.ctx.MemcpyDtoH(unsafe.Pointer(&b[0]), recv[r]+cuda.DevicePtr(win[0]*ts), uint64(len(b))); err != nil {
				return 0, err
			}
			for j, g := range decode(c.dt, b) {
				i := int(win[0]) + j
				var want float64
				switch c.coll {
				case collAllReduce, collReduce:
					want = c.reduceAt(i)
				case collReduceScatter:
					want = c.reduceAt(r*int(count) + i)
				case collAllGather:
					want = fillValue(i/int(count), i%int(count), c.op)
				case collBroadcast:
					want = fillValue(c.root, i, c.op)
				case collSendRecv:
					want = fillValue((r+c.nRanks-1)%c.nRanks, i, c.op)
				case collAllToAll:
					// Block j of our output is rank j's block r.
					want = fillValue(i/int(count), r*int(count)+i%int(count), c.op)
				}
				wr, ok := rounded[want]
				if !ok {
					wr = decode(c.dt, encode(c.dt, []float64{want}))[0]
					rounded[want] = wr
				}
				if tol := tolerance(c.dt, c.nRanks); math.Abs(g-wr) > tol*math.Max(1, math.Abs(wr)) || math.IsNaN(g) {
					wrong++
				}
			}
		}
	}
	return wrong, nil
}
