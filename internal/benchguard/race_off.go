//go:build !race

package benchguard

const raceEnabled = false
