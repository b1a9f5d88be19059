// Command ncclgen generates, lists, explains and builds ncclgo's collective
// kernel space.
//
// Usage:
//
//	ncclgen generate [--out DIR] [--only FILTER] [--arch sm_90,...]
//	ncclgen list [--only FILTER] [--summary]
//	ncclgen explain "AllReduce Sum bf16 RING LL128" [--only FILTER]
//	ncclgen build [--arch ...] [--only FILTER] [-j N] [--out FILE] [--cache DIR]
//	ncclgen inspect FILE [--fatbin OUT]
//
// Flags are GNU-style long options (--only, or -only for compatibility)
// and may follow the positional arguments. From a module that requires
// ncclgo, a slim kernel set is one line:
//
//	//go:generate go run github.com/ncclgo/ncclgo/cmd/ncclgen build --arch sm_90 --only "AllReduce Sum f32 * *" --out kernels.fatbin
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/kspace"
)

const usage = `usage: ncclgen <command> [arguments] [flags]

commands:
  generate   write the CUDA sources, tables, ABI and manifests (default --out generated)
  list       print the functions and kernels of a kernel set (--summary for counts)
  explain    describe one function: ncclgen explain "AllReduce Sum bf16 RING LL128"
  build      compile a kernel set with nvcc (--only FILTER: a slim set, leaving generated/ alone)
  inspect    print a built kernel set's manifest (--fatbin OUT: also write its bare fatbin)

Run 'ncclgen <command> --help' for a command's flags.
`

// errUsage marks errors after which the usage was printed.
var errUsage = errors.New("usage")

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "ncclgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "generate":
		return runGenerate(args[1:], stderr)
	case "list":
		return runList(args[1:], stdout, stderr)
	case "explain":
		return runExplain(args[1:], stdout, stderr)
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "inspect":
		return runInspect(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: valid commands are generate, list, explain, build, inspect", args[0])
}

// command is one subcommand's flag set.
type command struct {
	*pflag.FlagSet
	name, args, doc string
}

func newCommand(name, args, doc string, stderr io.Writer) *command {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	c := &command{FlagSet: fs, name: name, args: args, doc: doc}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ncclgen %s %s[flags]\n\n%s\n\nflags:\n", name, args, doc)
		fs.PrintDefaults()
	}
	return c
}

// parse parses args (flags anywhere among the positional arguments) and
// checks the number of positional arguments is within [minArgs, maxArgs]
// (maxArgs < 0: no limit). It returns errHelpShown for --help.
func (c *command) parse(args []string, minArgs, maxArgs int) error {
	if err := c.Parse(gnuArgs(c.FlagSet, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return errHelpShown
		}
		return fmt.Errorf("%s: %w", c.name, err)
	}
	n := c.NArg()
	switch {
	case n < minArgs && minArgs == 1:
		return fmt.Errorf("%s needs %s", c.name, strings.TrimSpace(c.args))
	case n < minArgs:
		return fmt.Errorf("%s needs %d arguments (%s), got %d", c.name, minArgs, strings.TrimSpace(c.args), n)
	case maxArgs >= 0 && n > maxArgs && maxArgs == 0:
		return fmt.Errorf("%s takes no arguments, got %q (flags are --name value; quote a filter that has spaces)", c.name, c.Args())
	case maxArgs >= 0 && n > maxArgs:
		return fmt.Errorf("%s takes %d argument(s) (%s), got %d: %q", c.name, maxArgs, strings.TrimSpace(c.args), n, c.Args())
	}
	return nil
}

// errHelpShown ends a command after --help printed its usage.
var errHelpShown = errors.New("help shown")

// gnuArgs rewrites Go-style single-dash long flags (-only X, -out=dir)
// that name a flag of fs to their GNU form (--only X), so the flags of
// existing scripts and go:generate lines keep working. Arguments after
// "--" are left alone.
func gnuArgs(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// ok turns errHelpShown into success.
func ok(err error) error {
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

func splitArches(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func runGenerate(args []string, stderr io.Writer) error {
	c := newCommand("generate", "", "Writes the CUDA sources, the host tables, the ABI and the manifests of a kernel set.", stderr)
	out := c.String("out", "generated", "output directory")
	only := c.String("only", "", "keep only the functions matching this filter (NCCL's ONLY_FUNCS grammar); rewrites the tables this module compiles with; prefer `ncclgen build --only`")
	arch := c.String("arch", strings.Join(gen.DefaultArches, ","), "comma-separated SM arches recorded as the build's default targets")
	devsrc := c.String("devicesrc", "", "device library directory relative to --out (default ../devicesrc)")
	if err := c.parse(args, 0, 0); err != nil {
		return ok(err)
	}
	if _, err := spaceOf(*only); err != nil {
		return err
	}
	if err := generateTo(*out, *only, splitArches(*arch), *devsrc); err != nil {
		return err
	}
	// The note is for the library's own tables (generated/), not for
	// trees that are slim on purpose (tests/devharness/gen).
	if strings.TrimSpace(*only) != "" && filepath.Base(filepath.Clean(*out)) == "generated" {
		fmt.Fprintf(stderr, "ncclgen generate: rewrote %s/ for the filter %q: code compiled from it now has only that kernel set's tables.\n"+
			"  Restore the full tree with `git checkout %s/` or `go generate ./...`.\n"+
			"  To build a slim kernel set without touching %s/, use `ncclgen build --only FILTER --out FILE`.\n", *out, *only, *out, *out)
	}
	return nil
}

func generateTo(out, only string, arches []string, devsrc string) error {
	files, err := generateFiles(only, arches, devsrc)
	if err != nil {
		return err
	}
	return gen.WriteDir(out, files)
}

func generateFiles(only string, arches []string, devsrc string) (gen.Files, error) {
	f, err := kspace.ParseFilter(only)
	if err != nil {
		return nil, err
	}
	return gen.Generate(gen.Options{Filter: f, Arches: arches, DeviceSrc: devsrc})
}

// spaceOf is the kernel space of a build with the filter pattern only; a
// filter that selects nothing says why.
func spaceOf(only string) (*kspace.Space, error) {
	f, err := kspace.ParseFilter(only)
	if err != nil {
		return nil, err
	}
	s, err := kspace.NewSpace(f)
	if errors.Is(err, kspace.ErrEmptyFilter) {
		return nil, fmt.Errorf("%w: %s", err, f.WhyEmpty())
	}
	return s, err
}

func runList(args []string, stdout, stderr io.Writer) error {
	c := newCommand("list", "", "Prints the functions and kernels of a kernel set.", stderr)
	only := c.String("only", "", "filter for a slim build")
	summary := c.Bool("summary", false, "print only the counts")
	if err := c.parse(args, 0, 0); err != nil {
		return ok(err)
	}
	s, err := spaceOf(*only)
	if err != nil {
		return err
	}
	if *summary {
		fmt.Fprintln(stdout, s.Summary())
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFUNCTION\tKERNEL\tSPECIALIZED\tIMPLEMENTED\tREQUIRES\tFILE")
	for i, fn := range s.Funcs {
		impl := fn.Kind != kspace.Ordinary || kspace.Implemented(fn.Coll, fn.Algo)
		file := "device_table.cu"
		if fn.Kind == kspace.Ordinary {
			file = kspace.UnitName(fn)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%v\t%s\t%s\n", i, fn, s.Kernels[s.KernelOf[i]], s.Specialized(i), impl, kspace.KernelReq(fn), file)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "KERNEL\tSYMBOL\tREQUIRES")
	for _, k := range s.Kernels {
		fmt.Fprintf(tw, "%s\tngDevKernel_%s\t%s\n", k, k.Symbol(), kspace.KernelReq(k))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, s.Summary())
	return nil
}

func runExplain(args []string, stdout, stderr io.Writer) error {
	c := newCommand("explain", `"Coll [RedOp Type] Algo Proto" `, `Describes one function, e.g. ncclgen explain "AllReduce Sum bf16 RING LL128".`, stderr)
	only := c.String("only", "", "explain within a slim build")
	if err := c.parse(args, 1, -1); err != nil {
		return ok(err)
	}
	fn, err := kspace.ParseFunc(strings.Join(c.Args(), " "))
	if err != nil {
		return err
	}
	s, err := spaceOf(*only)
	if err != nil {
		return err
	}
	f := s.Filter
	row, _ := kspace.RowOf(fn)
	fmt.Fprintf(stdout, "function:     %s\n", fn)
	fmt.Fprintf(stdout, "row:          %d\n", row)
	if _, why, ok := kspace.Requirements(fn); !ok {
		fmt.Fprintf(stdout, "valid:        no: %s\n", why)
		return nil
	}
	id := s.RowToID[row]
	impl := s.Funcs[id]
	fmt.Fprintf(stdout, "function id:  %d\n", id)
	if impl.Kind == kspace.Nop {
		fmt.Fprintf(stdout, "implemented:  by Nop: the filter %q leaves it out\n", f)
	} else {
		fmt.Fprintf(stdout, "implemented:  by %s", impl)
		if impl != fn {
			fmt.Fprint(stdout, " (same code as its equivalence class)")
		}
		fmt.Fprintln(stdout)
	}
	k := s.Kernels[s.KernelOf[id]]
	how := "through the device function table"
	if s.Specialized(id) {
		how = "inline"
	}
	fmt.Fprintf(stdout, "kernel:       ngDevKernel_%s (%s)\n", k.Symbol(), how)
	file := "device_table.cu"
	if impl.Kind == kspace.Ordinary {
		file = kspace.UnitName(impl)
	}
	fmt.Fprintf(stdout, "file:         generated/cuda/%s\n", file)
	fmt.Fprintf(stdout, "requires:     %s\n", kspace.KernelReq(fn))
	if fn.Kind == kspace.Ordinary && !kspace.Implemented(fn.Coll, fn.Algo) {
		fmt.Fprintf(stdout, "device code:  stub reporting \"unsupported\" (%s has no ncclgo device implementation yet)\n", fn.Algo)
	}
	return nil
}
