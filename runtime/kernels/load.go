package kernels

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/kset"
	"github.com/ncclgo/ncclgo/kspace"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// ErrReleased is returned by a Set's methods after Release.
var ErrReleased = errors.New("kernels: set is released")

// ErrMismatch is wrapped by the errors that say the image does not match
// its manifest, or has none.
var ErrMismatch = errors.New("kernels: image does not match its manifest")

// MismatchError reports a symbol that the kernel set's manifest lists but
// its image lacks or has in the wrong shape: the file is damaged, or its
// parts come from different builds.
type MismatchError struct {
	// Symbol is the kernel or global that is missing or wrong.
	Symbol string
	// Detail says what is wrong; empty means the image lacks Symbol.
	Detail string
	// Filter is the kernel set's filter.
	Filter string
	// Err is the driver's error, if any.
	Err error
}

func (e *MismatchError) Error() string {
	d := e.Detail
	if d == "" {
		d = "lacks " + e.Symbol + ", which its manifest lists"
	}
	s := fmt.Sprintf("kernels: the kernel set's image %s (set built with %s); rebuild the kernel set with ncclgen build", d, describeFilter(e.Filter))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrMismatch and the driver's error.
func (e *MismatchError) Unwrap() []error { return []error{ErrMismatch, e.Err} }

// Entry is what launching one function needs.
type Entry struct {
	// Kernel is the __global__ function to launch.
	Kernel *cuda.Function
	// FuncID is the function's index in the set's device function table,
	// the ngDevWork.funcId of its work.
	FuncID int
	// KernelIndex is Kernel's index in the set's kernel list: works of
	// one launch share it.
	KernelIndex int
	// Specialized is true when Kernel runs the function inline, without a
	// call through the table.
	Specialized bool
}

// key identifies a loaded module: one per device and image content.
type key struct {
	dev  cuda.Device
	ctx  uintptr // a caller's context (cuda.WrapContext); 0: the primary context
	size int
	hash uint64
}

// module is one cuModuleLoadData, shared by every Set of its key.
type module struct {
	key   key
	image []byte // the image first loaded; identity check avoids rehashing
	refs  int    // guarded by cache.mu
	ready chan struct{}
	err   error

	ctx       *cuda.Context // our own retain of the primary context
	mod       *cuda.Module
	tab       *tables          // from the set's manifest
	manifest  *kset.Manifest   // the set's manifest
	loaded    []byte           // the image given to the driver (part of image, or an aligned copy)
	arch      int              // __CUDA_ARCH__ units (900)
	kernels   []*cuda.Function // per tab.kernels; nil where absent
	absent    []string         // why kernels[i] is nil
	funcTable cuda.DevicePtr

	occMu sync.Mutex
	occ   map[int]int // nThreads -> MaxBlocksPerSM
}

var cache struct {
	mu   sync.Mutex
	mods map[key]*module
}

var seed = maphash.MakeSeed()

// Set is a rank's handle on the kernels of one device: a reference to the
// module shared by every Set of the same device and image. Release it when
// the communicator is destroyed.
type Set struct {
	m        *module
	released atomic.Bool
}

// Load loads image into ctx's device, or shares the module already loaded
// there from the same image: cuModuleLoadData runs once per (device,
// image) in the process, so co-located ranks share one module. The module
// is loaded in the device's primary context through a retain of its own,
// so it outlives ctx; ctx only names the device.
//
// image is a kernel-set file (package kset, what ncclgen build writes):
// a manifest that describes the set — its filter, device function table,
// kernels and ABI version — in front of the fatbin. Load refuses a set of
// another ABI version (an *ABIError naming both) and a bare image without
// a manifest, then resolves every kernel the manifest lists and the device
// function table; a symbol the image lacks fails with a *MismatchError.
// Kernels whose requirements the image's target lacks (an fp8 kernel in an
// image for sm_80) may be absent; Lookup then reports their functions as
// unsupported. Functions the set's filter left out are not an error here:
// Lookup reports them (ErrNotBuilt) when a call needs them. The image must
// not be modified while any Set of it is alive.
func Load(ctx *cuda.Context, image []byte) (*Set, error) {
	if ctx == nil {
		return nil, errors.New("kernels: Load: nil context")
	}
	if len(image) == 0 {
		return nil, fmt.Errorf("%w: Load: empty image", ErrNoImage)
	}
	dev := ctx.Device()
	var user uintptr
	if ctx.Wrapped() {
		user = ctx.Handle()
	}
	m, loader := acquire(dev, user, image)
	if loader {
		m.err = m.load(image)
		if m.err != nil {
			cache.mu.Lock()
			delete(cache.mods, m.key)
			cache.mu.Unlock()
		}
		close(m.ready)
	} else {
		<-m.ready
	}
	if m.err != nil {
		return nil, m.err
	}
	return &Set{m: m}, nil
}

// acquire finds or creates the cache entry for (dev, user context, image)
// and takes a reference; loader is true for the caller that must load it.
func acquire(dev cuda.Device, user uintptr, image []byte) (m *module, loader bool) {
	cache.mu.Lock()
	for _, m := range cache.mods {
		if m.key.dev == dev && m.key.ctx == user && len(m.image) == len(image) && unsafe.SliceData(m.image) == unsafe.SliceData(image) {
			m.refs++
			cache.mu.Unlock()
			return m, false
		}
	}
	cache.mu.Unlock()
	k := key{dev: dev, ctx: user, size: len(image), hash: maphash.Bytes(seed, image)}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if m := cache.mods[k]; m != nil {
		m.refs++
		return m, false
	}
	if cache.mods == nil {
		cache.mods = map[key]*module{}
	}
	m = &module{key: k, image: image, refs: 1, ready: make(chan struct{}), occ: map[int]int{}}
	cache.mods[k] = m
	return m, true
}

func (m *module) load(image []byte) (err error) {
	dev := m.key.dev
	var ctx *cuda.Context
	if m.key.ctx != 0 {
		ctx, err = cuda.WrapContext(m.key.ctx) // modules live in the caller's context
	} else {
		ctx, err = dev.PrimaryContext()
	}
	if err != nil {
		return fmt.Errorf("kernels: device %d: %w", int(dev), err)
	}
	defer func() {
		if err != nil {
			if m.mod != nil {
				_ = m.mod.Unload()
				m.mod = nil
			}
			_ = ctx.Release()
		}
	}()
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return fmt.Errorf("kernels: device %d: %w", int(dev), err)
	}
	m.arch = major*100 + minor*10
	tab, man, image, err := splitSet(image)
	if err != nil {
		return err
	}
	m.tab, m.manifest, m.loaded = tab, man, image
	mod, err := ctx.LoadModule(image)
	if err != nil {
		return fmt.Errorf("kernels: loading the kernel image on device %d (sm_%d%d): %w", int(dev), major, minor, err)
	}
	m.ctx, m.mod = ctx, mod
	m.kernels = make([]*cuda.Function, len(tab.kernels))
	m.absent = make([]string, len(tab.kernels))
	for i, k := range tab.kernels {
		f, ferr := mod.Function(k.Symbol)
		if ferr == nil {
			// Loaded now, not at its first launch (see cuda.Function.Load).
			if err := f.Load(); err != nil {
				return fmt.Errorf("kernels: loading %s on device %d: %w", k.Symbol, int(dev), err)
			}
			m.kernels[i] = f
			continue
		}
		if !k.Req.IsZero() {
			// Compiled out for this target (#if guards on the arch or the
			// CUDA version): its functions are unsupported here.
			m.absent[i] = fmt.Sprintf("kernel %s is not in the image: its build compiled it out (it needs %s; device %d is sm_%d%d)", k.Symbol, k.Req, int(dev), major, minor)
			continue
		}
		return &MismatchError{Symbol: k.Symbol, Filter: tab.filter, Err: ferr}
	}
	p, size, err := mod.Global(tab.funcTable)
	if err != nil {
		return &MismatchError{Symbol: tab.funcTable, Filter: tab.filter, Err: err}
	}
	if want := kset.FuncTableBytes(len(tab.funcs)); size != want {
		return &MismatchError{
			Symbol: tab.funcTable,
			Detail: fmt.Sprintf("has %d bytes of %s, not the %d its manifest implies (%d functions and a terminator)", size, tab.funcTable, want, len(tab.funcs)),
			Filter: tab.filter,
		}
	}
	m.funcTable = p
	return nil
}

func (s *Set) mod() (*module, error) {
	if s == nil || s.released.Load() {
		return nil, ErrReleased
	}
	return s.m, nil
}

// Lookup returns the kernel and table id that run f, through the set's
// manifest. Errors wrap ErrInvalid, ErrNotBuilt (the set's filter left f
// out: the error names f and the filter) or ErrUnsupported (no device
// implementation, or the device cannot run f: its kernel or table entry
// was compiled out for this device's arch).
func (s *Set) Lookup(f kspace.Func) (Entry, error) {
	m, err := s.mod()
	if err != nil {
		return Entry{}, err
	}
	id, err := m.tab.resolve(f)
	if err != nil {
		return Entry{}, err
	}
	info := m.tab.funcs[id]
	if info.Req.Arch > m.arch {
		return Entry{}, fmt.Errorf("%w: %v needs %s; device %d is sm_%d", ErrUnsupported, f, info.Req, int(m.key.dev), m.arch/10)
	}
	k := m.kernels[info.Kernel]
	if k == nil {
		return Entry{}, fmt.Errorf("%w: %v: %s", ErrUnsupported, f, m.absent[info.Kernel])
	}
	return Entry{Kernel: k, FuncID: id, KernelIndex: info.Kernel, Specialized: info.Specialized}, nil
}

// Resolve is Lookup in the shape of the planner's function lookup
// (enqueue.FuncLookup): f's id in the set's device function table and the
// index of the kernel that runs it.
func (s *Set) Resolve(f kspace.Func) (funcID, kernel int, err error) {
	e, err := s.Lookup(f)
	if err != nil {
		return 0, 0, err
	}
	return e.FuncID, e.KernelIndex, nil
}

// Available reports whether the set can run f on its device: Lookup
// succeeds. The tuner chooses only among available functions.
func (s *Set) Available(f kspace.Func) bool {
	_, err := s.Lookup(f)
	return err == nil
}

// Manifest returns the set's manifest (shared: do not modify it).
func (s *Set) Manifest() *kset.Manifest { return s.m.manifest }

// Filter returns the pattern the set was built with ("" for every
// function).
func (s *Set) Filter() string { return s.m.tab.filter }

// NumKernels returns the number of kernels the set's manifest lists.
func (s *Set) NumKernels() int { return len(s.m.kernels) }

// KernelSymbol returns the symbol of the set's i-th kernel.
func (s *Set) KernelSymbol(i int) string { return s.m.tab.kernels[i].Symbol }

// Kernel returns the set's i-th kernel, or nil when the image lacks it for
// this device (see Load).
func (s *Set) Kernel(i int) *cuda.Function {
	m, err := s.mod()
	if err != nil || i < 0 || i >= len(m.kernels) {
		return nil
	}
	return m.kernels[i]
}

// FuncTable returns the device address of the device function table.
func (s *Set) FuncTable() (cuda.DevicePtr, error) {
	m, err := s.mod()
	if err != nil {
		return 0, err
	}
	return m.funcTable, nil
}

// Device returns the device the set's module is loaded on.
func (s *Set) Device() cuda.Device { return s.m.key.dev }

// Arch returns the device's compute capability in __CUDA_ARCH__ units (900
// for sm_90), comparable with kspace.Req.Arch.
func (s *Set) Arch() int { return s.m.arch }

// MaxBlocksPerSM returns how many blocks of nThreads threads of every
// kernel fit on one SM at once: the minimum of the occupancy of each
// kernel. Multiplied by the SM count it bounds the channels (blocks) that
// all the ranks sharing the device may use together while staying resident
// at once. Results are cached per nThreads.
func (s *Set) MaxBlocksPerSM(nThreads int) (int, error) {
	m, err := s.mod()
	if err != nil {
		return 0, err
	}
	if nThreads <= 0 || nThreads > generated.MaxNthreads {
		return 0, fmt.Errorf("kernels: MaxBlocksPerSM(%d): threads must be 1..%d", nThreads, generated.MaxNthreads)
	}
	m.occMu.Lock()
	defer m.occMu.Unlock()
	if n, ok := m.occ[nThreads]; ok {
		return n, nil
	}
	best := -1
	for i, k := range m.kernels {
		if k == nil {
			continue
		}
		n, err := k.MaxActiveBlocksPerSM(nThreads, 0)
		if err != nil {
			return 0, fmt.Errorf("kernels: occupancy of %s with %d threads: %w", m.tab.kernels[i].Symbol, nThreads, err)
		}
		if best < 0 || n < best {
			best = n
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("kernels: no kernel of the image runs on device %d", int(m.key.dev))
	}
	m.occ[nThreads] = best
	return best, nil
}

// Release drops this Set's reference; the module is unloaded (and the
// primary context released) when the last Set of it is released. Release is
// idempotent; the Set is unusable afterwards.
func (s *Set) Release() error {
	if s == nil || !s.released.CompareAndSwap(false, true) {
		return nil
	}
	m := s.m
	cache.mu.Lock()
	m.refs--
	last := m.refs == 0
	if last {
		delete(cache.mods, m.key)
	}
	cache.mu.Unlock()
	if !last {
		return nil
	}
	var errs []error
	if m.mod != nil {
		if err := m.mod.Unload(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.ctx != nil {
		if err := m.ctx.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kernels: releasing the module on device %d: %w", int(m.key.dev), err)
	}
	return nil
}
