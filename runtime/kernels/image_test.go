package kernels

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fakeFatbin() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b, fatbinMagic)
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// isolate runs the test in an empty module directory with no
// $NCCLGO_FATBIN, so that nothing outside the test is found.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), []byte("module x\n"))
	t.Chdir(dir)
	t.Setenv(EnvFatbin, "")
	return dir
}

func TestFindImageNothing(t *testing.T) {
	if embeddedImage() != nil {
		t.Skip("built with -tags ncclgo_embed")
	}
	dir := isolate(t)
	_, _, err := FindImage("")
	require.ErrorIs(t, err, ErrNoImage)
	msg := err.Error()
	for _, want := range []string{
		"option path: not set",
		"$NCCLGO_FATBIN: not set",
		"embedded image: not compiled in",
		filepath.Join(dir, "build", "ncclgo.fatbin") + ": no such file",
		"ncclgen build",
		"make",
	} {
		assert.Contains(t, msg, want)
	}
	t.Log(msg)
}

func TestFindImageOrder(t *testing.T) {
	if embeddedImage() != nil {
		t.Skip("built with -tags ncclgo_embed")
	}
	dir := isolate(t)
	img := fakeFatbin()

	// build/ncclgo.fatbin in a parent directory, up to the module root.
	writeFile(t, filepath.Join(dir, "build", "ncclgo.fatbin"), img)
	sub := filepath.Join(dir, "a", "b")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	t.Chdir(sub)
	b, src, err := FindImage("")
	require.NoError(t, err)
	assert.Equal(t, img, b)
	assert.Equal(t, filepath.Join(dir, "build", "ncclgo.fatbin"), src)

	// The environment beats the default path.
	envImg := append(fakeFatbin(), 'e')
	envPath := filepath.Join(dir, "env.fatbin")
	writeFile(t, envPath, envImg)
	t.Setenv(EnvFatbin, envPath)
	b, src, err = FindImage("")
	require.NoError(t, err)
	assert.Equal(t, envImg, b)
	assert.Equal(t, "$NCCLGO_FATBIN="+envPath, src)

	// The explicit path beats the environment.
	optImg := append(fakeFatbin(), 'o')
	optPath := filepath.Join(dir, "opt.fatbin")
	writeFile(t, optPath, optImg)
	b, src, err = FindImage(optPath)
	require.NoError(t, err)
	assert.Equal(t, optImg, b)
	assert.Equal(t, optPath, src)
}

func TestFindImageExplicitMissingIsAnError(t *testing.T) {
	dir := isolate(t)
	writeFile(t, filepath.Join(dir, "build", "ncclgo.fatbin"), fakeFatbin())

	_, _, err := FindImage(filepath.Join(dir, "nope.fatbin"))
	require.ErrorIs(t, err, ErrNoImage)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "nope.fatbin")

	t.Setenv(EnvFatbin, filepath.Join(dir, "gone.fatbin"))
	_, _, err = FindImage("")
	require.ErrorIs(t, err, ErrNoImage)
	assert.Contains(t, err.Error(), "$NCCLGO_FATBIN=")
	assert.Contains(t, err.Error(), "gone.fatbin")
}

func TestFindImageRejectsGarbage(t *testing.T) {
	dir := isolate(t)
	p := filepath.Join(dir, "junk.fatbin")
	writeFile(t, p, []byte("hello world"))
	_, _, err := FindImage(p)
	require.ErrorIs(t, err, ErrNoImage)
	assert.Contains(t, err.Error(), "not a fatbin, cubin or PTX")

	// A bad file at the default path is reported, not skipped.
	writeFile(t, filepath.Join(dir, "build", "ncclgo.fatbin"), nil)
	_, _, err = FindImage("")
	require.ErrorIs(t, err, ErrNoImage)
	assert.Contains(t, err.Error(), "empty image")
}

func TestFromBytes(t *testing.T) {
	img := fakeFatbin()
	b, src, err := FromBytes(img)
	require.NoError(t, err)
	assert.Equal(t, img, b)
	assert.Equal(t, "image supplied by the program", src)

	for _, ok := range [][]byte{[]byte("\x7fELF\x02\x01"), []byte("//\n.version 8.4\n.target sm_90\n")} {
		_, _, err := FromBytes(ok)
		assert.NoError(t, err)
	}
	_, _, err = FromBytes(nil)
	assert.ErrorIs(t, err, ErrNoImage)
	_, _, err = FromBytes([]byte{1, 2, 3, 4, 5})
	assert.ErrorIs(t, err, ErrNoImage)
}
