//go:build race

package ncclgo

func init() { raceEnabled = true }
