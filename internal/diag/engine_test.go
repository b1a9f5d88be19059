package diag

import (
	"errors"
	"strings"
	"testing"
)

// Dump hands Connections what Engine makes of each communicator: the
// public *ncclgo.Comm of package tests reaches runtime/comm as its engine.
func TestDumpUnwrapsWithEngine(t *testing.T) {
	type wrapper struct{ inner string }
	oldC, oldE := Connections, Engine
	t.Cleanup(func() { Connections, Engine = oldC, oldE })
	var got []any
	Connections = func(c any) ([]Conn, error) {
		got = append(got, c)
		if _, ok := c.(string); !ok {
			return nil, errors.New("not an engine")
		}
		return nil, nil
	}
	Engine = func(c any) any {
		if w, ok := c.(wrapper); ok {
			return w.inner
		}
		return c
	}
	out := Dump([]any{wrapper{"e0"}, wrapper{"e1"}})
	if len(got) != 2 || got[0] != "e0" || got[1] != "e1" {
		t.Fatalf("Connections got %v, want the unwrapped engines e0, e1", got)
	}
	if strings.Contains(out, "not an engine") {
		t.Fatalf("dump reports an unwrapped value: %s", out)
	}
}
