package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// LaunchGraph is a CUDA graph of one kernel node that plain launches may
// go through (Stream.LaunchVia, Ops.Via): before each launch the node is
// set to it (cuGraphExecKernelNodeSetParams: function, shape and
// arguments), then the graph is launched (cuGraphLaunch). On the H200
// that costs the host about half a cuLaunchKernel (BenchmarkGPULaunch's
// params=12B against graphVia). A launch the node holds already (the same
// kernel, grid, block and parameter bytes as the launch before) skips the
// update (Same counts those). A launch whose update the driver refuses
// goes through cuLaunchKernel instead; Launches counts both.
//
// CUDA orders every launch of one executable graph after the one before
// it, on whatever stream: a LaunchGraph must only carry launches that are
// ordered anyway, one rank's for instance. It carries one launch at a
// time; LaunchVia and Ops.Run take its lock.
type LaunchGraph struct {
	ctx *Context
	mu  sync.Mutex
	g   *C.ncu_launch_graph // C memory: Ops' operations point at it

	waits  []*Event // NewJoinGraph's
	record *Event
}

// MaxJoinWaits is the most events a join graph waits for.
const MaxJoinWaits = C.NCU_LAUNCH_GRAPH_MAX_WAITS

// NewLaunchGraph makes a launch graph whose node starts as fn's launch
// with grid × block threads (one-dimensional) and the packed parameters
// args; nothing is launched. Destroy it with Destroy once its last launch
// is queued (the driver keeps what is queued).
func (c *Context) NewLaunchGraph(fn *Function, grid, block uint32, args []byte) (*LaunchGraph, error) {
	return c.NewJoinGraph(fn, grid, block, args, nil, nil)
}

// NewJoinGraph is NewLaunchGraph with the stream's joins in the graph: its
// kernel node runs after a wait for each event of waits (at most
// MaxJoinWaits; a wait node waits for what the event captured when the
// graph is launched, as cuStreamWaitEvent at that point would), and, unless
// record is nil, the graph records record after the kernel. Launching it
// thus replaces a stream's waits, the launch and the record after it.
func (c *Context) NewJoinGraph(fn *Function, grid, block uint32, args []byte, waits []*Event, record *Event) (*LaunchGraph, error) {
	h, err := c.ctx("NewLaunchGraph")
	if err != nil {
		return nil, err
	}
	switch {
	case fn == nil || fn.h == nil:
		return nil, badArg("NewLaunchGraph", "nil *Function")
	case fn.mod == nil || fn.mod.h == nil:
		return nil, badArg("NewLaunchGraph", "function %q: module is unloaded", fn.name)
	case fn.mod.ctx.h != h:
		return nil, badArg("NewLaunchGraph", "function %q belongs to another context", fn.name)
	case grid == 0 || block == 0:
		return nil, badArg("NewLaunchGraph", "grid %d or block %d is zero", grid, block)
	}
	if len(waits) > MaxJoinWaits {
		return nil, badArg("NewLaunchGraph", "%d events to wait for, want at most %d", len(waits), MaxJoinWaits)
	}
	var hw [MaxJoinWaits]C.CUevent
	for i, e := range waits {
		if e == nil || e.h == nil {
			return nil, badArg("NewLaunchGraph", "wait %d: nil or destroyed *Event", i)
		}
		hw[i] = e.h
	}
	var hr C.CUevent
	if record != nil {
		if record.h == nil {
			return nil, badArg("NewLaunchGraph", "record: destroyed *Event")
		}
		hr = record.h
	}
	g := (*C.ncu_launch_graph)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ncu_launch_graph{}))))
	if g == nil {
		return nil, fmt.Errorf("cuda: NewLaunchGraph: out of host memory")
	}
	var p unsafe.Pointer
	if len(args) > 0 {
		p = unsafe.Pointer(&args[0])
	}
	r := C.ncu_launch_graph_new(h, g, fn.h, C.uint(grid), C.uint(block), p, C.size_t(len(args)), &hw[0], C.int(len(waits)), hr)
	if err := check("cuGraphAddKernelNode", Result(r)); err != nil {
		C.free(unsafe.Pointer(g))
		return nil, c.wrap(fmt.Sprintf("NewLaunchGraph(%q, grid %d, block %d, %d arg bytes, %d waits)", fn.name, grid, block, len(args), len(waits)), err)
	}
	return &LaunchGraph{ctx: c, g: g, waits: slices.Clone(waits), record: record}, nil
}

// isJoin reports whether g holds a stream's joins (NewJoinGraph with
// waits or a record): launching without it would drop them.
func (g *LaunchGraph) isJoin() bool { return len(g.waits) > 0 || g.record != nil }

// Joins reports whether g is the join graph of waits and record (in that
// order).
func (g *LaunchGraph) Joins(waits []*Event, record *Event) bool {
	return g.record == record && slices.Equal(g.waits, waits)
}

// Launches returns how many launches went through the graph and how many
// the driver would not put in it (those went through cuLaunchKernel).
func (g *LaunchGraph) Launches() (through, refused uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.g == nil {
		return 0, 0
	}
	return uint64(g.g.launches), uint64(g.g.refused)
}

// Same returns how many launches through the graph found its node as
// they wanted it (kernel, grid, block and parameters those of the launch
// before), and so launched the graph without updating the node.
func (g *LaunchGraph) Same() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.g == nil {
		return 0
	}
	return uint64(g.g.same)
}

// Destroy destroys the graph. Launches already queued run; g must not be
// used afterwards. Destroying a nil or destroyed graph does nothing.
func (g *LaunchGraph) Destroy() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.g == nil {
		return nil
	}
	defer func() {
		C.free(unsafe.Pointer(g.g)) // whatever the driver says: g is done with
		g.g = nil
	}()
	h, err := g.ctx.ctx("LaunchGraph.Destroy")
	if err != nil {
		return err
	}
	r := Result(C.ncu_launch_graph_destroy(h, g.g))
	return g.ctx.wrap("LaunchGraph.Destroy", check("cuGraphExecDestroy", r))
}

// via returns g's C graph for a launch in context h, or nil when the
// launch must go the ordinary way (no graph, destroyed, another context).
// g.mu is held.
func (g *LaunchGraph) via(h C.CUcontext) *C.ncu_launch_graph {
	if g == nil || g.g == nil || g.ctx == nil || g.ctx.h != h {
		return nil
	}
	return g.g
}
