//go:build !unix

package nvbuild

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}
