package envmap

import (
	"strings"
	"testing"
)

func TestGetenv(t *testing.T) {
	get := Getenv("A", "1", "B", "", "A", "2")
	for k, want := range map[string]string{"A": "1", "B": "", "C": ""} {
		if got := get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("odd pairs: no panic")
		}
	}()
	Getenv(strings.Fields("A")...) // one name, no value
}
