package topo

import (
	"os"
	"strings"
)

// bootIDPath holds the kernel's random id of the current boot (Linux).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// MachineID names the machine this process runs on, whatever NCCL_HOSTID
// says: two processes with equal ids share the machine's GPUs (a GPU's
// PCI bus id then names one GPU for both). It is the kernel's boot id
// (which containers of one machine share), else the host name. readFile
// is os.ReadFile and hostname os.Hostname normally.
//
// NCCL_HOSTID makes processes of one machine distinct hosts (the fake
// hosts of the multi-process matrix), and what must count every rank of
// a physical GPU (the ranks whose blocks compete for its SMs) groups by
// MachineID rather than by host.
func MachineID(readFile func(string) ([]byte, error), hostname func() (string, error)) string {
	if b, err := readFile(bootIDPath); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return "boot:" + id
		}
	}
	if h, err := hostname(); err == nil && h != "" {
		return "host:" + h
	}
	return ""
}

// ThisMachine is MachineID of this process.
func ThisMachine() string { return MachineID(os.ReadFile, os.Hostname) }
