// Command enumswitch runs the enumswitch analysis (package
// internal/analysis/enumswitch): it reports switches over a vocabulary enum
// that miss a value and have no default, and exits non-zero when it finds
// one. `make test` runs it as
//
//	go run ./internal/tools/enumswitch ./...
//
// It also works as a vet tool: go vet -vettool=$(which enumswitch) ./...
package main

import (
	"github.com/ncclgo/ncclgo/internal/analysis/enumswitch"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(enumswitch.Analyzer) }
