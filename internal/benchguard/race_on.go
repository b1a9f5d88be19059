//go:build race

package benchguard

// RaceEnabled reports whether the race detector is on: it changes every
// figure, and its sync.Pool drops a share of what is put back, so that
// pooled memory allocates now and then.
const RaceEnabled = true
