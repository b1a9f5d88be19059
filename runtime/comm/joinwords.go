package comm

import (
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/cuda"
)

// EnvMultiJoin chooses how a multi-rank launch joins the other ranks'
// streams to the stream it launches on: "events" (the default) records an
// event on each and waits for it there; "words" has each write a word of
// device memory (cuStreamWriteValue32, a sequence number) and the
// launching stream wait for all of them in one call (cuStreamBatchMemOp):
// at 8 ranks six driver calls fewer (7 records and 7 waits become 7
// writes and one wait). After the launch every stream waits for the
// launch's completion event either way.
const EnvMultiJoin = "NCCLGO_MULTI_JOIN"

// multiJoinWordsFromEnv reads EnvMultiJoin through lookup: whether the
// joins go through words.
func multiJoinWordsFromEnv(lookup func(string) (string, bool)) (bool, error) {
	return envChoice(lookup, EnvMultiJoin, false, map[string]bool{"events": false, "words": true},
		"events (the default: an event recorded on each stream) or words (a word of device memory written on each, waited for in one call)")
}

// joinWordSlots is how many streams a rank joins through words; its
// further streams join through events.
const joinWordSlots = 32

// joinWords are a rank's words for joining its streams to multi-rank
// launches (Settings.JoinWords): one per stream, given in order of first
// use and kept for good, each with the sequence number of its latest
// write. A word's values only grow, since only its stream writes it, in
// launch order; a word per rank would not do, as a rank's launches on two
// streams could land out of order and let a wait pass early. A stream
// handle is not handed out again while the destroyed stream's work (a
// write) is queued (cuStreamDestroy keeps its resources until then), so
// a word never has two streams' writes in flight. Guarded by the
// engine's mu.
type joinWords struct {
	mem  cuda.DevicePtr // joinWordSlots words, zeroed at Init; 0 when off
	slot map[uintptr]int
	seq  [joinWordSlots]uint32
}

// setupJoinWords allocates and zeroes e's words. The zeroing goes through
// the legacy stream, which Init synchronizes before any launch; doing it
// here keeps it out of any capture (runMultiOps queues its operations
// before its capture checks run).
func (e *Engine) setupJoinWords() error {
	p, err := e.cctx.MemAlloc(4 * joinWordSlots)
	if err != nil {
		return fmt.Errorf("the words for joining streams (%s=words): %w", EnvMultiJoin, err)
	}
	e.words.mem = p
	if err := e.cctx.MemsetD8(p, 0, 4*joinWordSlots); err != nil {
		return fmt.Errorf("the words for joining streams (%s=words): %w", EnvMultiJoin, err)
	}
	e.words.slot = make(map[uintptr]int)
	return nil
}

// nextJoinWord returns the word of stream h and the sequence number its
// next write carries, counted as written; ok is false when e joins through
// events or has no word left for h. Under e.mu.
func (e *Engine) nextJoinWord(h uintptr) (p cuda.DevicePtr, seq uint32, ok bool) {
	w := &e.words
	if w.mem == 0 {
		return 0, 0, false
	}
	i, found := w.slot[h]
	if !found {
		if len(w.slot) == joinWordSlots {
			return 0, 0, false
		}
		i = len(w.slot)
		w.slot[h] = i
	}
	w.seq[i]++
	return w.mem + cuda.DevicePtr(4*i), w.seq[i], true
}
