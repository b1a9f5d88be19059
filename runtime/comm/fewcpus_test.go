package comm

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFewCPUsWarning(t *testing.T) {
	for _, n := range []int{1, 2} {
		w := fewCPUsWarning(n)
		assert.Contains(t, w, "--bind-to none", "%d CPUs", n)
		assert.Contains(t, w, "NET", "%d CPUs", n)
	}
	assert.Empty(t, fewCPUsWarning(3))
	assert.Empty(t, fewCPUsWarning(64))
}
