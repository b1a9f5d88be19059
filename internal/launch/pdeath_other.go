//go:build !linux

package launch

import "syscall"

// dieWithParent: only Linux has a parent-death signal.
func dieWithParent() *syscall.SysProcAttr { return nil }
