package comm

import (
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// EnvProgrammatic chooses which collective kernels are programmatic
// dependent launches: each may start while the kernel before it on its
// stream winds down, and waits for it once it has loaded its arguments
// (enqueue.Launcher's Programmatic, devicesrc's ngKernelMain). "auto" (the
// default) launches so the kernels of a rank that shares its GPU with no
// other rank of its process, and every rank's kernels captured into a
// CUDA graph (capturedProgrammaticFor); "1" every communicator's, "0"
// none. It applies on GPUs of
// compute capability 9.0 and later with a driver of CUDA 12.0 or later;
// elsewhere the launches are plain.
//
// Why auto: on one H200 (session 13) it cut an 8 B AllReduce across two
// processes from 6.43 to 4.72 µs eager and from 3.53 to 3.15 µs under
// graph replay, and one rank's replay from 1.20 to 0.96 µs; with two ranks
// of one process on one GPU it gained nothing, and without MPS it doubled
// their eager time (17.5 against 8.4 µs) and made replays bimodal (6.5
// µs). Ranks of one process on different GPUs launch as ranks alone in
// their process do: each GPU runs one rank's kernels, and no multi-rank
// launch joins them (docs/DEVELOPING.md's two-GPU plan measures it).
const EnvProgrammatic = "NCCLGO_PDL"

// Programmatic is EnvProgrammatic's choice.
type Programmatic int

const (
	// ProgrammaticAuto launches so the kernels of a rank that shares its
	// GPU with no other rank of its process.
	ProgrammaticAuto Programmatic = iota
	// ProgrammaticOff launches every kernel plainly.
	ProgrammaticOff
	// ProgrammaticOn launches every collective kernel so.
	ProgrammaticOn
)

// programmaticFromEnv reads EnvProgrammatic through lookup.
func programmaticFromEnv(lookup func(string) (string, bool)) (Programmatic, error) {
	return envChoice(lookup, EnvProgrammatic, ProgrammaticAuto,
		map[string]Programmatic{"auto": ProgrammaticAuto, "0": ProgrammaticOff, "1": ProgrammaticOn},
		"auto (programmatic dependent launches for ranks that share their GPU with no rank of their process, the default), 1 (for every communicator) or 0 (plain launches)")
}

// EnvTriggerEarly turns off ("0") or on ("1", the default) the early
// start of a communicator's next programmatic kernel: once every block of
// a kernel has waited for the grids before it, the kernel lets the next
// one on its stream launch and load its arguments while it runs
// (enqueue.Launcher.TriggerEarlyBlocks, generated.ArgsTriggerEarly). It
// applies only where kernels are programmatic (EnvProgrammatic), and to
// kernels small enough that twice the blocks of every rank on the GPU
// fit it (triggerEarlyBlocks).
const EnvTriggerEarly = "NCCLGO_PDL_EARLY"

// triggerEarlyFromEnv reads EnvTriggerEarly through lookup.
func triggerEarlyFromEnv(lookup func(string) (string, bool)) (bool, error) {
	return envChoice(lookup, EnvTriggerEarly, true, map[string]bool{"0": false, "1": true},
		"1 (a programmatic kernel lets the next one start once it has waited for those before it, the default) or 0 (only once it ends)")
}

// triggerEarlyBlocks is enqueue.Launcher.TriggerEarlyBlocks for a
// communicator of nChannels channels (the most blocks a rank's launch may
// have, the residency ledger's width) whose GPU holds budget co-resident
// blocks shared by ranksPerGPU ranks: a kernel that starts the next one
// early has both resident, so at most half of each bound; 0 when early
// starts are off.
func triggerEarlyBlocks(on bool, nChannels, budget, ranksPerGPU int) int {
	if !on || ranksPerGPU < 1 {
		return 0
	}
	return min(nChannels/2, budget/(2*ranksPerGPU))
}

// capturedProgrammaticFor reports whether the kernels a rank queues on a
// stream being captured into a CUDA graph are programmatic launches under
// mode on a GPU of compute capability major ccMajor: under auto and 1,
// for every rank. What auto spares ranks that share a process and a GPU
// is their eager launch path (the multi-rank launch joined by events);
// in a graph each rank's kernels replay on their own, and there the
// programmatic ones with early starts were faster (session 16, 2 ranks of
// one process, five rounds: median 3.11 against 3.61 µs plain).
func capturedProgrammaticFor(mode Programmatic, ccMajor int) bool {
	return ccMajor >= 9 && mode != ProgrammaticOff
}

// programmaticFor reports whether rank's kernels are launched
// programmatically under mode, given every rank's process (procs) and
// its GPU's compute capability major (ccMajor): never below 9, which has
// no programmatic launch (the attribute is not asked for there).
func programmaticFor(mode Programmatic, procs []transport.Peer, rank, ccMajor int) bool {
	if ccMajor < 9 {
		return false
	}
	switch mode {
	case ProgrammaticOn:
		return true
	case ProgrammaticOff:
		return false
	}
	for r := range procs {
		if r != rank && procs[r].SameProcess(procs[rank]) && procs[r].SameGPU(procs[rank]) {
			return false
		}
	}
	return true
}
