package transport

import "syscall"

func ipcClose(fd int) {
	if fd >= 0 {
		_ = syscall.Close(fd)
	}
}
