//go:build !linux

package tests

import "syscall"

// mpDieWithParent: only Linux has a parent-death signal; the child's own
// watch (mpWatchParent) ends it there.
func mpDieWithParent() *syscall.SysProcAttr { return nil }
