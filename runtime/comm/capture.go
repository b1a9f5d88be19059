package comm

import (
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
// their streams' chains, by stream handle: the last one of each stream,
// which the stream's next captured record follows when it is of the same
// capture. Guarded by Engine.mu.
type besideRecords map[uintptr]cuda.GraphRecord

// queueRecord adds the record of ev after a launch on stream to o: in the
// chain, or under capture with Settings.CaptureRecordBeside beside it.
// Read its node with recorded after o ran. e.mu is held.
func (e *Engine) queueRecord(o *cuda.Ops, ev *cuda.Event, stream *cuda.Stream, captured bool) int {
	if captured && e.s.CaptureRecordBeside {
		return o.RecordBeside(ev, stream, e.beside[stream.Handle()], cuda.OpAlways)
	}
	return o.Record(ev, stream, captured, cuda.OpAlways)
}

// recorded keeps the node of queueRecord's operation i, when it made one.
// e.mu is held.
func (e *Engine) recorded(o *cuda.Ops, i int, stream *cuda.Stream) {
	if r := o.GraphRecord(i); r.Beside() {
		e.keepBeside(stream, r)
	}
}

// record records ev after the work queued on stream, as queueRecord says,
// now. e.mu is held.
func (e *Engine) record(c enqueue.Capture, ev *cuda.Event, stream *cuda.Stream) error {
	if !bool(c) || !e.s.CaptureRecordBeside {
		return c.Record(ev, stream)
	}
	r, err := ev.RecordBeside(stream, e.beside[stream.Handle()])
	if err == nil && r.Beside() {
		e.keepBeside(stream, r)
	}
	return err
}

func (e *Engine) keepBeside(stream *cuda.Stream, r cuda.GraphRecord) {
	if e.beside == nil {
		e.beside = besideRecords{}
	}
	e.beside[stream.Handle()] = r
}
