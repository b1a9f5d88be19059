package comm

// EnvKernelGraph chooses how a communicator's plain kernel launches (on
// streams not being captured) reach the driver: "1" (the default) through
// a CUDA graph of one kernel node, updated to each launch and launched
// whole (enqueue.Launcher.LaunchGraphs, cuda.LaunchGraph), which costs the
// host less than cuLaunchKernel; "joins" the same, and a multi-rank
// launch's graph also holds its stream's waits for the other ranks'
// streams and its completion record (enqueue.Launcher.JoinGraphs); "0"
// through cuLaunchKernel. Programmatic launches (EnvProgrammatic) and
// captured ones are unchanged.
const EnvKernelGraph = "NCCLGO_KERNEL_GRAPH"

// KernelGraphs is EnvKernelGraph's choice.
type KernelGraphs int

const (
	// KernelGraphsOn sends plain launches through launch graphs.
	KernelGraphsOn KernelGraphs = iota
	// KernelGraphsOff sends them through cuLaunchKernel.
	KernelGraphsOff
	// KernelGraphsJoins also puts a multi-rank launch's joins in its graph.
	KernelGraphsJoins
)

// kernelGraphFromEnv reads EnvKernelGraph through lookup.
func kernelGraphFromEnv(lookup func(string) (string, bool)) (KernelGraphs, error) {
	return envChoice(lookup, EnvKernelGraph, KernelGraphsOn,
		map[string]KernelGraphs{"1": KernelGraphsOn, "0": KernelGraphsOff, "joins": KernelGraphsJoins},
		"1 (plain launches go through a launch graph, the default), joins (and a multi-rank launch's joins in its graph) or 0 (through cuLaunchKernel)")
}
