package comm

import (
	"sync"

	"github.com/ncclgo/ncclgo/runtime/cuda"
	"github.com/ncclgo/ncclgo/runtime/enqueue"
)

// EnvCaptureRecord picks where a launch captured into a CUDA graph puts
// its completion record (the external event record node that each replay
// runs, enqueue.Capture): "beside" (the default) in a branch beside the
// stream's chain (cuda.Event.RecordBeside; in the chain where the driver
// lacks the calls it needs), so that the next captured
// kernel follows the kernel directly while the records, each after its
// kernel and the record before it, keep the event's order; "chain" in the
// stream's chain, after the kernel and before the stream's next node.
// Both order a rank's later launches elsewhere after each replay alike;
// "beside" takes one node off the path between two captured collectives.
// On the H200 (session 11) a replayed kernel cost 1097 ns with no record,
// 1106 with one beside, 1615 with one in the chain
// (BenchmarkGPUGraphReplay), and 100 replayed 8 B AllReduces of one rank
// 0.93 against 1.66 µs each; of two processes 3.51 against 3.87.
const EnvCaptureRecord = "NCCLGO_CAPTURE_RECORD"

// captureRecordFromEnv reads EnvCaptureRecord through lookup: whether
// captured records go beside the chain.
func captureRecordFromEnv(lookup func(string) (string, bool)) (beside bool, _ error) {
	return envChoice(lookup, EnvCaptureRecord, true, map[string]bool{"beside": true, "chain": false},
		"beside (the completion record in a branch beside the captured stream's chain, the default) or chain (in the chain)")
}

// besideRecords are the record nodes that captured launches put beside
// their streams' chains, by stream handle and event: the latest of each,
// which the event's next captured record on that stream moves, or follows
// when it is of the same capture (cuda.Event.RecordBeside). Guarded by
// Engine.mu.
type besideRecords map[besideKey]cuda.GraphRecord

type besideKey struct {
	stream uintptr
	ev     *cuda.Event
}

// capturedWaits holds the events that a capture's external event wait
// node waits for (a rank's launch ordered after its previous one on
// another stream) since their latest record beside a chain. The next
// record of such an event adds a node after that record instead of moving
// it (cuda.GraphRecord.Kept), so that no record moves past a wait that
// counts on it. Such waits are rare and each record takes its event out,
// so the set stays small; Destroy takes out what is left of an engine's.
var capturedWaits sync.Map // *cuda.Event → struct{}

// noteCapturedWait notes a captured wait for ev (capturedWaits).
func noteCapturedWait(ev *cuda.Event) { capturedWaits.Store(ev, struct{}{}) }

// besidePrev returns the record that ev's next record beside stream's
// chain moves or follows. e.mu is held.
func (e *Engine) besidePrev(ev *cuda.Event, stream *cuda.Stream) cuda.GraphRecord {
	prev := e.beside[besideKey{stream.Handle(), ev}]
	if _, waited := capturedWaits.LoadAndDelete(ev); waited {
		prev = prev.Kept()
	}
	return prev
}

// queueRecord adds the record of ev after a launch on stream to o: in the
// chain, or under capture with Settings.CaptureRecordBeside beside it.
// Read its node with recorded after o ran. e.mu is held.
func (e *Engine) queueRecord(o *cuda.Ops, ev *cuda.Event, stream *cuda.Stream, captured bool) int {
	if captured && e.s.CaptureRecordBeside {
		return o.RecordBeside(ev, stream, e.besidePrev(ev, stream), cuda.OpAlways)
	}
	return o.Record(ev, stream, captured, cuda.OpAlways)
}

// recorded keeps the node of queueRecord's operation i, when it made one.
// e.mu is held.
func (e *Engine) recorded(o *cuda.Ops, i int, ev *cuda.Event, stream *cuda.Stream) {
	if r := o.GraphRecord(i); r.Beside() {
		e.keepBeside(ev, stream, r)
	}
}

// record records ev after the work queued on stream, as queueRecord says,
// now. e.mu is held.
func (e *Engine) record(c enqueue.Capture, ev *cuda.Event, stream *cuda.Stream) error {
	if !bool(c) || !e.s.CaptureRecordBeside {
		return c.Record(ev, stream)
	}
	r, err := ev.RecordBeside(stream, e.besidePrev(ev, stream))
	if err == nil && r.Beside() {
		e.keepBeside(ev, stream, r)
	}
	return err
}

// captureWait makes stream wait for ev as c says, noting a captured wait
// (noteCapturedWait).
func captureWait(c enqueue.Capture, stream *cuda.Stream, ev *cuda.Event) error {
	if c {
		noteCapturedWait(ev)
	}
	return c.Wait(stream, ev)
}

func (e *Engine) keepBeside(ev *cuda.Event, stream *cuda.Stream, r cuda.GraphRecord) {
	if e.beside == nil {
		e.beside = besideRecords{}
	}
	e.beside[besideKey{stream.Handle(), ev}] = r
}
