package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
)

// NCCLGO_CPUPROFILE=FILE writes a Go CPU profile of the library (host time
// per call: argument checks, planning, launches) to FILE.<pid>, from the
// first communicator's creation to the last one's destroy, so that a
// client such as PyTorch can be profiled without changing it. Read it with
// go tool pprof.
var profile struct {
	mu   sync.Mutex
	live int      // communicators alive while profiling
	f    *os.File // the open profile, nil when none
}

// profileStart counts a new communicator and starts the profile at the first.
func profileStart() {
	path := os.Getenv("NCCLGO_CPUPROFILE")
	if path == "" {
		return
	}
	profile.mu.Lock()
	defer profile.mu.Unlock()
	profile.live++
	if profile.f != nil || profile.live > 1 {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
	if err != nil {
		setLastError(fmt.Sprintf("NCCLGO_CPUPROFILE: %v", err))
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		setLastError(fmt.Sprintf("NCCLGO_CPUPROFILE: %v", err))
		f.Close()
		return
	}
	profile.f = f
}

// profileStop uncounts a communicator and ends the profile at the last.
func profileStop() {
	profile.mu.Lock()
	defer profile.mu.Unlock()
	if profile.live == 0 {
		return
	}
	profile.live--
	if profile.live == 0 && profile.f != nil {
		pprof.StopCPUProfile()
		profile.f.Close()
		profile.f = nil
	}
}
