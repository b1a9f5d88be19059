package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestContextLost: the codes after which a context is unusable, matched
// through wrapping; others are not.
func TestContextLost(t *testing.T) {
	for _, r := range []Result{ResultIllegalAddress, ResultContextIsDestroyed, 715, 716, ResultLaunchFailed, 805, 810} {
		assert.True(t, r.ContextLost(), "%d", int(r))
		assert.True(t, ContextLost(fmt.Errorf("x: %w", &Error{Op: "cuMemFree", Code: r})), "%d wrapped", int(r))
	}
	for _, r := range []Result{ResultSuccess, ResultInvalidValue, ResultOutOfMemory, ResultNotReady, ResultLaunchOutOfResources, 720, 804, 811} {
		assert.False(t, r.ContextLost(), "%d", int(r))
	}
	assert.False(t, ContextLost(errors.New("cuMemFree: CUDA_ERROR_ILLEGAL_ADDRESS")), "only an *Error counts")
	assert.False(t, ContextLost(nil))
}
