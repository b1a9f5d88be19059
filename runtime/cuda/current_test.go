package cuda

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// currentOnThisThread locks the test to its OS thread and makes a context
// of the test device current there; cleanup restores the thread's previous
// context and unlocks it.
func currentOnThisThread(t *testing.T) *Context {
	t.Helper()
	c := gpu(t)
	runtime.LockOSThread()
	prev, err := CurrentContextHandle()
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, SetCurrentContext(prev))
		runtime.UnlockOSThread()
	})
	require.NoError(t, SetCurrentContext(c.Handle()))
	return c
}

// TestCurrentContext: the thread's current context is what
// SetCurrentContext made it, CurrentDevice names its device, and 0 leaves
// the thread without one.
func TestCurrentContext(t *testing.T) {
	c := currentOnThisThread(t)
	h, err := CurrentContextHandle()
	require.NoError(t, err)
	assert.Equal(t, c.Handle(), h)
	d, ok, err := CurrentDevice()
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, c.Device(), d)

	require.NoError(t, SetCurrentContext(0))
	_, ok, err = CurrentDevice()
	require.NoError(t, err)
	assert.False(t, ok, "no current context after SetCurrentContext(0)")
}

// TestCurrentContextWraps: CurrentContext wraps the thread's current
// context as a caller's context, and fails when there is none.
func TestCurrentContextWraps(t *testing.T) {
	c := currentOnThisThread(t)
	w, err := CurrentContext()
	require.NoError(t, err)
	assert.True(t, w.Wrapped())
	assert.Equal(t, c.Handle(), w.Handle())
	assert.Equal(t, c.Device(), w.Device())
	require.NoError(t, w.Release()) // forgets only the wrapper
	_, _, err = c.MemGetInfo()
	require.NoError(t, err, "the context lives on after releasing a wrapper")

	require.NoError(t, SetCurrentContext(0))
	_, err = CurrentContext()
	assert.ErrorIs(t, err, ErrInvalidValue)
}

func TestCopyAPIFromEnv(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k != CopyAPIEnv {
				t.Fatalf("looked up %s", k)
			}
			return v, set
		}
	}
	for _, tc := range []struct {
		v    string
		set  bool
		mode copyMode
	}{{"", false, copyAuto}, {"", true, copyAuto}, {"auto", true, copyAuto}, {"dtod", true, copyDtoD}, {"generic", true, copyGeneric}, {"kernel", true, copyKernel}} {
		got, err := copyAPIFromEnv(env(tc.v, tc.set))
		if err != nil || got != tc.mode {
			t.Errorf("%s=%q (set %v): %v, %v; want %v", CopyAPIEnv, tc.v, tc.set, got, err, tc.mode)
		}
	}
	_, err := copyAPIFromEnv(env("memcpy", true))
	if err == nil || !strings.Contains(err.Error(), `NCCLGO_COPY_API="memcpy"`) || !strings.Contains(err.Error(), "dtod") {
		t.Errorf("a bad value: %v", err)
	}
}
