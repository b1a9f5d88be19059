package ncclgo

import (
	"testing"

	"github.com/ncclgo/ncclgo/internal/diag"
	"github.com/ncclgo/ncclgo/runtime/comm"
)

// A hung group's dump in package tests passes *Comm values: they must
// reach runtime/comm's hook as engines, not as "is not a communicator".
func TestDiagEngineUnwrapsComm(t *testing.T) {
	var c Comm
	if _, ok := diag.Engine(&c).(*comm.Engine); !ok {
		t.Fatalf("diag.Engine(*Comm) = %T, want *comm.Engine", diag.Engine(&c))
	}
	if got := diag.Engine("x"); got != "x" {
		t.Fatalf("diag.Engine(\"x\") = %v, want it unchanged", got)
	}
}
