package cuda

import (
	"fmt"
	"testing"
)

// BenchmarkGPUHostPath measures how fast data moves between the GPU and
// page-locked host memory (cuMemHostAlloc, device-mapped): a kernel
// (copy16, 512 threads a block, four 16-byte loads in flight per thread)
// reading host memory into device memory and writing device memory into
// host memory, with 1 to 32 blocks, and the copy engines
// (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync). The NET transport's staging
// lives in such memory: the sending kernel writes it and the receiving
// kernel reads it, one block per channel, so these figures bound what NET
// can move per channel on the GPU side, whatever the sockets do. MB/s is
// the bytes moved (64 MiB a copy).
func BenchmarkGPUHostPath(b *testing.B) {
	c := gpu(b)
	m := loadTestModule(b, c)
	copy16, err := m.Function("copy16")
	if err != nil {
		b.Fatal(err)
	}
	const size = 64 << 20
	host, err := c.MemAllocHost(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.MemFreeHost(host)
	hostDev, err := c.HostDevicePointer(host)
	if err != nil {
		b.Fatal(err)
	}
	dev, err := c.MemAlloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.MemFree(dev)
	s, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()

	kernel := func(src, dst DevicePtr, blocks uint32) func() error {
		var a packArgs
		a.u64(uint64(src))
		a.u64(uint64(dst))
		a.u64(size / 16)
		return func() error { return s.Launch(copy16, Dim1(blocks), Dim1(512), 0, a.b) }
	}
	run := func(name string, op func() error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			if err := op(); err != nil { // warm-up
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, blocks := range []uint32{1, 2, 4, 8, 16, 32} {
		run(fmt.Sprintf("kernel-reads-host/blocks=%d", blocks), kernel(hostDev, dev, blocks))
		run(fmt.Sprintf("kernel-writes-host/blocks=%d", blocks), kernel(dev, hostDev, blocks))
	}
	run("ce-htod", func() error { return s.MemcpyHtoDAsync(dev, host, size) })
	run("ce-dtoh", func() error { return s.MemcpyDtoHAsync(host, dev, size) })
}
