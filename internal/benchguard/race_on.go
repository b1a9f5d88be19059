//go:build race

package benchguard

const raceEnabled = true
