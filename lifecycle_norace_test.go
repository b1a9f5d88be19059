//go:build !race

package ncclgo

// raceEnabled tells lifecycle_test.go that the race detector is on.
const raceEnabled = false
