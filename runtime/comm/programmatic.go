package comm

import (
	"github.com/ncclgo/ncclgo/runtime/transport"
)

// EnvProgrammatic chooses which collective kernels are programmatic
// dependent launches: each may start while the kernel before it on its
// stream winds down, and waits for it once it has loaded its arguments
// (enqueue.Launcher's Programmatic, devicesrc's ngKernelMain). "auto" (the
// default) launches so the kernels of a communicator that has one rank in
// this process, "1" every communicator's, "0" none. It applies on GPUs of
// compute capability 9.0 and later with a driver of CUDA 12.0 or later;
// elsewhere the launches are plain.
//
// Why auto: on one H200 (session 13) it cut an 8 B AllReduce across two
// processes from 6.43 to 4.72 µs eager and from 3.53 to 3.15 µs under
// graph replay, and one rank's replay from 1.20 to 0.96 µs; with two ranks
// in one process it gained nothing, and without MPS it doubled their
// eager time (17.5 against 8.4 µs) and made replays bimodal (6.5 µs).
const EnvProgrammatic = "NCCLGO_PDL"

// Programmatic is EnvProgrammatic's choice.
type Programmatic int

const (
	// ProgrammaticAuto launches so the kernels of a communicator with
	// one rank in this process.
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
		"auto (programmatic dependent launches for communicators with one rank in this process, the default), 1 (for every communicator) or 0 (plain launches)")
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
		if r != rank && procs[r].SameProcess(procs[rank]) {
			return false
		}
	}
	return true
}
