package enumswitch_test

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/analysis/enumswitch"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestAnalyzer(t *testing.T) {
	a := enumswitch.Analyzer
	old := a.Flags.Lookup("pkgs").Value.String()
	if err := a.Flags.Set("pkgs", "vocab"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Flags.Set("pkgs", old) })
	analysistest.Run(t, analysistest.TestData(), a, "vocab", "use")
}
