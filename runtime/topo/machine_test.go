package topo

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMachineID(t *testing.T) {
	boot := func(s string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			assert.Equal(t, bootIDPath, p)
			return []byte(s), nil
		}
	}
	noFile := func(string) ([]byte, error) { return nil, errors.New("no such file") }
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	noHost := func() (string, error) { return "", errors.New("no name") }

	assert.Equal(t, "boot:8c1f", MachineID(boot("8c1f\n"), host("a")))
	assert.Equal(t, MachineID(boot("8c1f\n"), host("a")), MachineID(boot("8c1f"), host("b")), "one boot, two host names (containers)")
	assert.Equal(t, "host:a", MachineID(noFile, host("a")))
	assert.Equal(t, "host:a", MachineID(boot("  \n"), host("a")))
	assert.Equal(t, "", MachineID(noFile, noHost))
	assert.NotEmpty(t, ThisMachine())
}
