package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/ncclgo/ncclgo/gen/abi"
	"github.com/ncclgo/ncclgo/kspace"
)

const kspacePath = "github.com/ncclgo/ncclgo/kspace"

// multi renders a composite literal with one element per line.
var multi = jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}

func render(f *jen.File) ([]byte, error) {
	var b bytes.Buffer
	if err := f.Render(&b); err != nil {
		return nil, fmt.Errorf("gen: rendering Go: %w", err)
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("gen: formatting Go: %w", err)
	}
	return out, nil
}

func funcLit(f kspace.Func) jen.Code {
	if f.Kind == kspace.Nop {
		return jen.Qual(kspacePath, "NopFunc")
	}
	if f.Kind == kspace.Generic {
		return jen.Qual(kspacePath, "GenericKernel")
	}
	field := func(v int, name string, values func(int) string) jen.Code {
		if v == kspace.Unset {
			return jen.Id(name).Op(":").Qual(kspacePath, "Unset")
		}
		return jen.Id(name).Op(":").Qual(kspacePath, values(v))
	}
	// kspace's Go constants, named as the vocabulary tables say.
	return jen.Qual(kspacePath, "Func").Values(
		field(int(f.Coll), "Coll", func(v int) string { return kspace.Colls[v].Name }),
		field(int(f.RedOp), "RedOp", func(v int) string { return kspace.RedOps[v].Name }),
		field(int(f.Type), "Type", func(v int) string { return strings.ToUpper(kspace.Types[v].Name) }),
		field(int(f.Algo), "Algo", func(v int) string { return kspace.Algos[v].GoName }),
		field(int(f.Proto), "Proto", func(v int) string { return kspace.Protos[v].GoName }),
	)
}

func emitGoTables(s *kspace.Space, opts Options) ([]byte, error) {
	f := jen.NewFile(opts.GoPackage)
	f.HeaderComment(Header)
	f.PackageComment("Package " + opts.GoPackage + " holds the output of ncclgen for this kernel set: the host\n" +
		"dispatch tables, the kernel list and the host<->device ABI structs.")

	f.Comment("Filter is the pattern this kernel set was generated with; empty keeps every function.")
	f.Const().Id("Filter").Op("=").Lit(s.Filter.String())
	f.Comment("FuncTableSymbol is the device function table's symbol in the fatbin.")
	f.Const().Id("FuncTableSymbol").Op("=").Lit("ngDevFuncTable")

	f.Comment("FuncInfo describes one entry of the device function table.")
	f.Type().Id("FuncInfo").Struct(
		jen.Id("Func").Qual(kspacePath, "Func"),
		jen.Comment("Symbol is the device function's name stem."),
		jen.Id("Symbol").String(),
		jen.Comment("Kernel indexes Kernels: the kernel that runs this function."),
		jen.Id("Kernel").Int(),
		jen.Comment("Specialized is true when that kernel runs the function inline."),
		jen.Id("Specialized").Bool(),
		jen.Comment("Implemented is false for stubs that report \"unsupported\"."),
		jen.Id("Implemented").Bool(),
		jen.Comment("Req is what the function needs from CUDA."),
		jen.Id("Req").Qual(kspacePath, "Req"),
	)
	f.Comment("KernelInfo describes one kernel of the fatbin.")
	f.Type().Id("KernelInfo").Struct(
		jen.Id("Func").Qual(kspacePath, "Func"),
		jen.Comment("Symbol is the extern \"C\" name of the __global__ function."),
		jen.Id("Symbol").String(),
		jen.Id("Req").Qual(kspacePath, "Req"),
	)

	reqLit := func(r kspace.Req) jen.Code {
		if r.IsZero() {
			return jen.Qual(kspacePath, "Req").Values()
		}
		return jen.Qual(kspacePath, "Req").Values(jen.Id("CUDART").Op(":").Lit(r.CUDART), jen.Id("Arch").Op(":").Lit(r.Arch))
	}
	f.Comment("Funcs is the device function table, in table order.")
	f.Var().Id("Funcs").Op("=").Index().Id("FuncInfo").CustomFunc(multi, func(g *jen.Group) {
		for i, fn := range s.Funcs {
			impl := fn.Kind != kspace.Ordinary || kspace.Implemented(fn.Coll, fn.Algo)
			g.Values(
				jen.Id("Func").Op(":").Add(funcLit(fn)),
				jen.Id("Symbol").Op(":").Lit("ngDevFunc_"+fn.Symbol()),
				jen.Id("Kernel").Op(":").Lit(s.KernelOf[i]),
				jen.Id("Specialized").Op(":").Lit(s.Specialized(i)),
				jen.Id("Implemented").Op(":").Lit(impl),
				jen.Id("Req").Op(":").Add(reqLit(kspace.KernelReq(fn))),
			)
		}
	})
	f.Comment("Kernels lists the fatbin's kernels.")
	f.Var().Id("Kernels").Op("=").Index().Id("KernelInfo").CustomFunc(multi, func(g *jen.Group) {
		for _, k := range s.Kernels {
			g.Values(
				jen.Id("Func").Op(":").Add(funcLit(k)),
				jen.Id("Symbol").Op(":").Lit("ngDevKernel_"+k.Symbol()),
				jen.Id("Req").Op(":").Add(reqLit(kspace.KernelReq(k))),
			)
		}
	})
	f.Comment("RowToID maps a function row (kspace.RowOf) to its index in Funcs; -1 marks a row that is never valid.")
	f.Var().Id("RowToID").Op("=").Index().Int16().CustomFunc(multi, func(g *jen.Group) {
		for i := 0; i < len(s.RowToID); i += 16 {
			line := s.RowToID[i:min(i+16, len(s.RowToID))]
			g.CustomFunc(jen.Options{Separator: ","}, func(g *jen.Group) {
				for _, id := range line {
					g.Lit(id)
				}
			})
		}
	})
	return render(f)
}

func goFieldType(fl abi.Field) *jen.Statement {
	var t *jen.Statement
	if fl.Count > 0 {
		t = jen.Index(jen.Lit(fl.Count))
	} else {
		t = jen.Null()
	}
	if fl.Struct != nil {
		return t.Id(abi.GoName(fl.Struct.Name))
	}
	return t.Id(fl.Scalar.GoType())
}

func emitGoABI(opts Options) ([]byte, error) {
	f := jen.NewFile(opts.GoPackage)
	f.HeaderComment(Header)
	f.Comment("The host<->device ABI, declared once in gen/abi; include/ngabi.h is its C twin.")
	f.Line()
	f.Comment("ABIVersion identifies this ABI (a hash of the declaration); a kernel set records the version it was built with.")
	f.Const().Id("ABIVersion").Op("=").Lit(ABIVersion())
	f.Line()
	f.Const().DefsFunc(func(g *jen.Group) {
		for _, c := range append(abi.Consts, spaceConsts()...) {
			g.Comment(abi.ConstGoName(c.Name) + " is " + c.Name + ": " + c.Doc + ".")
			g.Id(abi.ConstGoName(c.Name)).Op("=").Lit(int(c.Value))
		}
	})
	for _, st := range abi.Structs {
		name := abi.GoName(st.Name)
		f.Comment(name + " is " + st.Name + ": " + st.Doc + ".")
		f.Type().Id(name).StructFunc(func(g *jen.Group) {
			for _, fl := range st.Fields {
				s := jen.Id(abi.GoName(fl.Name)).Add(goFieldType(fl))
				if fl.Doc != "" {
					s.Comment(fl.Doc)
				}
				g.Add(s)
			}
		})
	}
	f.Comment("Layouts gives each struct's declared size and field offsets, for layout tests.")
	f.Var().Id("Layouts").Op("=").Map(jen.String()).Struct(jen.Id("Size").Int(), jen.Id("Offsets").Index().Int()).CustomFunc(multi, func(g *jen.Group) {
		for _, st := range abi.Structs {
			l := st.Layout()
			g.Lit(abi.GoName(st.Name)).Op(":").Values(
				jen.Id("Size").Op(":").Lit(l.Size),
				jen.Id("Offsets").Op(":").Index().Int().ValuesFunc(func(g *jen.Group) {
					for _, o := range l.Offsets {
						g.Lit(o)
					}
				}),
			)
		}
	})
	return render(f)
}
