// Command ncclgen generates, lists, explains and builds ncclgo's collective
// kernel space.
//
// Usage:
//
//	ncclgen generate [--out DIR] [--only FILTER] [--arch sm_90,...]
//	ncclgen list [--only FILTER] [--summary]
//	ncclgen explain "AllReduce Sum bf16 RING LL128"
//	ncclgen build [--arch ...] [--only FILTER] [-j N] [--out FILE] [--cache DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ncclgo/ncclgo/gen"
	"github.com/ncclgo/ncclgo/gen/kspace"
)

const usage = `usage: ncclgen <command> [flags]

commands:
  generate   write the CUDA sources, tables, ABI and manifest (default --out generated)
  list       print the functions and kernels of a kernel set (--summary for counts)
  explain    describe one function: ncclgen explain "AllReduce Sum bf16 RING LL128"
  build      compile the generated sources into one fatbin with nvcc
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "ncclgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
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
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: valid commands are generate, list, explain, build", args[0])
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
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "generated", "output directory")
	only := fs.String("only", "", "filter for a slim build (NCCL's ONLY_FUNCS grammar)")
	arch := fs.String("arch", strings.Join(gen.DefaultArches, ","), "comma-separated SM arches recorded as the build's default targets")
	devsrc := fs.String("devicesrc", "", "device library directory relative to --out (default ../devicesrc)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return generateTo(*out, *only, splitArches(*arch), *devsrc)
}

func generateTo(out, only string, arches []string, devsrc string) error {
	f, err := kspace.ParseFilter(only)
	if err != nil {
		return err
	}
	files, err := gen.Generate(gen.Options{Filter: f, Arches: arches, DeviceSrc: devsrc})
	if err != nil {
		return err
	}
	return gen.WriteDir(out, files)
}

func init() {
	// ncclgen build --only regenerates into a directory of its own first.
	generateForBuild = func(_ context.Context, dir, filter string, arches []string) error {
		return generateTo(dir, filter, arches, "")
	}
}

// spaceOf is the kernel space of a build with the filter pattern only.
func spaceOf(only string) (*kspace.Space, error) {
	f, err := kspace.ParseFilter(only)
	if err != nil {
		return nil, err
	}
	return kspace.NewSpace(f)
}

func runList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "filter for a slim build")
	summary := fs.Bool("summary", false, "print only the counts")
	if err := fs.Parse(args); err != nil {
		return err
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
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "explain within a slim build")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New(`explain needs a function, e.g. ncclgen explain "AllReduce Sum bf16 RING LL128"`)
	}
	fn, err := kspace.ParseFunc(strings.Join(fs.Args(), " "))
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
