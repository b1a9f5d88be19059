package comm

import "fmt"

// EnvSimpleOneHop chooses where a RING/SIMPLE AllReduce on exactly 2
// ranks may run in one hop (each rank sends its input, then reduces the
// peer's with its own; tune.Topology.SimpleOneHop): "auto" (the default)
// across hosts, where every hop is a network round trip, "1" everywhere,
// "0" nowhere. Every rank tunes with rank 0's choice.
const EnvSimpleOneHop = "NCCLGO_SIMPLE_ONEHOP"

// simpleOneHopFromEnv reads EnvSimpleOneHop through lookup: whether one
// hop applies to a communicator spanning nNodes hosts.
func simpleOneHopFromEnv(lookup func(string) (string, bool), nNodes int) (bool, error) {
	return envChoice(lookup, EnvSimpleOneHop, nNodes > 1, map[string]bool{"auto": nNodes > 1, "0": false, "1": true},
		"auto (one hop for 2-rank SIMPLE AllReduce across hosts, the default), 1 (everywhere) or 0 (never)")
}

// envChoice reads the variable name through lookup: def when it is unset
// or empty, choices[v] for a value v it lists, else an error naming the
// variable and its value and saying what is valid (want).
func envChoice[T any](lookup func(string) (string, bool), name string, def T, choices map[string]T, want string) (T, error) {
	v, _ := lookup(name)
	if v == "" {
		return def, nil
	}
	if c, ok := choices[v]; ok {
		return c, nil
	}
	var zero T
	return zero, fmt.Errorf("ncclgo: %s=%q: want %s", name, v, want)
}
