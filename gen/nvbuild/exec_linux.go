package nvbuild

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs cmd in its own process group and makes cancellation
// kill the whole group: nvcc forks cicc, ptxas and friends, which must not
// outlive a cancelled build. Pdeathsig also takes nvcc down if this process
// dies without cancelling (killed, broken pipe).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
