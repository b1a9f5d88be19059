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
	switch v, _ := lookup(EnvSimpleOneHop); v {
	case "", "auto":
		return nNodes > 1, nil
	case "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("ncclgo: %s=%q: want auto (one hop for 2-rank SIMPLE AllReduce across hosts, the default), 1 (everywhere) or 0 (never)", EnvSimpleOneHop, v)
	}
}
