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
// and may follow the positional arguments; 'ncclgen help build' (or
// 'ncclgen build --help') prints a command's flags. Usage errors exit 2,
// other failures 1 (package internal/cli). From a module that requires
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
	"github.com/ncclgo/ncclgo/gen/nvbuild"
	"github.com/ncclgo/ncclgo/internal/cli"
	"github.com/ncclgo/ncclgo/kspace"
)

const usage = `usage: ncclgen <command> [arguments] [flags]

commands:
  generate   write the CUDA sources, tables, ABI and manifests (default --out generated)
  list       print the functions and kernels of a kernel set (--summary for counts)
  explain    describe one function: ncclgen explain "AllReduce Sum bf16 RING LL128"
  build      compile a kernel set with nvcc (--only FILTER: a slim set, leaving generated/ alone)
  inspect    print a built kernel set's manifest (--fatbin OUT: also write its bare fatbin)

Run 'ncclgen help <command>' for a command's flags.
`

// commands are ncclgen's subcommands, by name.
var commands = map[string]func(args []string, stdout, stderr io.Writer) error{
	"generate": runGenerate,
	"list":     runList,
	"explain":  runExplain,
	"build":    runBuild,
	"inspect":  runInspect,
}

// commandNames lists the commands for an error text.
const commandNames = "generate, list, explain, build, inspect"

// main follows internal/cli's convention: usage errors exit 2, other
// failures 1.
func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ncclgen:", err)
	}
	os.Exit(cli.ExitCode(err))
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usagef("no command: want one of %s", commandNames)
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "--help", "-help":
		switch {
		case len(rest) == 0:
			fmt.Fprint(stdout, usage)
			return nil
		case len(rest) > 1:
			return cli.Usagef("help takes one command, got %q", rest)
		case commands[rest[0]] == nil:
			return cli.Usagef("help %q: unknown command; valid commands are %s", rest[0], commandNames)
		}
		return commands[rest[0]]([]string{"--help"}, stdout, stderr)
	}
	cmd := commands[name]
	if cmd == nil {
		return cli.Usagef("unknown command %q: valid commands are %s (ncclgen help lists them)", name, commandNames)
	}
	return cmd(rest, stdout, stderr)
}

// command is one subcommand's flag set.
type command struct {
	*pflag.FlagSet
	name, args, doc string
	stdout          io.Writer // where --help prints the usage
}

func newCommand(name, args, doc string, stdout io.Writer) *command {
	return &command{FlagSet: cli.NewFlagSet(name), name: name, args: args, doc: doc, stdout: stdout}
}

// usage prints the command's usage.
func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: ncclgen %s %s[flags]\n\n%s\n\nflags:\n%s", c.name, c.args, c.doc, c.FlagUsages())
}

// parse parses args (flags anywhere among the positional arguments) and
// checks the number of positional arguments is within [minArgs, maxArgs]
// (maxArgs < 0: no limit). For --help it prints the usage on stdout and
// returns cli.ErrHelp; what is wrong with args it returns as a
// *cli.UsageError.
func (c *command) parse(args []string, minArgs, maxArgs int) error {
	if err := cli.Parse(c.FlagSet, args); err != nil {
		if errors.Is(err, cli.ErrHelp) {
			c.usage(c.stdout)
			return err
		}
		return c.usageErr(err)
	}
	n := c.NArg()
	switch {
	case n < minArgs && minArgs == 1:
		return c.usageErr(fmt.Errorf("needs %s", strings.TrimSpace(c.args)))
	case n < minArgs:
		return c.usageErr(fmt.Errorf("needs %d arguments (%s), got %d", minArgs, strings.TrimSpace(c.args), n))
	case maxArgs >= 0 && n > maxArgs && maxArgs == 0:
		return c.usageErr(fmt.Errorf("takes no arguments, got %q (flags are --name value; quote a filter that has spaces)", c.Args()))
	case maxArgs >= 0 && n > maxArgs:
		return c.usageErr(fmt.Errorf("takes %d argument(s) (%s), got %d: %q", maxArgs, strings.TrimSpace(c.args), n, c.Args()))
	}
	return nil
}

// usageErr is err, a mistake on the command line, named by the command
// and pointing at its usage.
func (c *command) usageErr(err error) error {
	return cli.Usagef("%s: %w ('ncclgen help %s' lists its flags)", c.name, err, c.name)
}

// ok turns the end of a --help into success.
func ok(err error) error {
	if errors.Is(err, cli.ErrHelp) {
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

func runGenerate(args []string, stdout, stderr io.Writer) error {
	c := newCommand("generate", "", "Writes the CUDA sources, the host tables, the ABI and the manifests of a kernel set.", stdout)
	out := c.String("out", "generated", "output `directory`")
	only := c.String("only", "", "keep only the functions matching this `filter` (NCCL's ONLY_FUNCS grammar); rewrites the tables this module compiles with: prefer 'ncclgen build --only'")
	arch := c.String("arch", strings.Join(gen.DefaultArches, ","), "comma-separated SM `arches` recorded as the build's default targets")
	devsrc := c.String("devicesrc", "", "device library `directory` relative to --out (default ../devicesrc)")
	if err := c.parse(args, 0, 0); err != nil {
		return ok(err)
	}
	if _, err := spaceOf(*only); err != nil {
		return c.usageErr(fmt.Errorf("--only: %w", err))
	}
	if _, err := nvbuild.ParseArches(splitArches(*arch)); err != nil {
		return c.usageErr(fmt.Errorf("--arch: %w", err))
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
	c := newCommand("list", "", "Prints the functions and kernels of a kernel set.", stdout)
	only := c.String("only", "", "list the slim kernel set of this `filter`")
	summary := c.Bool("summary", false, "print only the counts")
	if err := c.parse(args, 0, 0); err != nil {
		return ok(err)
	}
	s, err := spaceOf(*only)
	if err != nil {
		return c.usageErr(fmt.Errorf("--only: %w", err))
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
	c := newCommand("explain", `"Coll [RedOp Type] Algo Proto" `, `Describes one function, e.g. ncclgen explain "AllReduce Sum bf16 RING LL128".`, stdout)
	only := c.String("only", "", "explain within the slim kernel set of this `filter`")
	if err := c.parse(args, 1, -1); err != nil {
		return ok(err)
	}
	fn, err := kspace.ParseFunc(strings.Join(c.Args(), " "))
	if err != nil {
		return c.usageErr(err)
	}
	s, err := spaceOf(*only)
	if err != nil {
		return c.usageErr(fmt.Errorf("--only: %w", err))
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
	for _, sib := range s.InlineSiblings(k) {
		switch {
		case sib.ID != id:
		case sib.LLOneShot:
			how = fmt.Sprintf("inline from sm_%d for the works that take DIRECT's LL one-shot, else through the device function table", kspace.InlineArch/10)
		default:
			how = fmt.Sprintf("inline from sm_%d, through the device function table before", kspace.InlineArch/10)
		}
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
