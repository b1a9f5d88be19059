//go:build !amd64 && !arm64

package ipc

const sysMemfdCreate = 0
