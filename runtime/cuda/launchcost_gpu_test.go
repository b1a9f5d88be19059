package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// launchParamSizes are the parameter block sizes BenchmarkGPULaunchParams
// compares: a pointer, a small header, and up to ncclgo's 4 KiB kernel
// argument block (gen/abi's ngKernelArgs), which every collective launch
// passes whole.
var launchParamSizes = []int{16, 256, 1024, 4096}

// emptyKernelsPTX is one empty kernel per size in launchParamSizes,
// ngEmpty<N>, whose only parameter is an N-byte block.
func emptyKernelsPTX() string {
	var b strings.Builder
	b.WriteString(".version 7.0\n.target sm_50\n.address_size 64\n")
	for _, n := range launchParamSizes {
		fmt.Fprintf(&b, ".visible .entry ngEmpty%d(.param .align 16 .b8 p[%d])\n{\n\tret;\n}\n", n, n)
	}
	return b.String()
}

// BenchmarkGPULaunchParams measures the host's cost of cuLaunchKernel
// (Stream.Launch) for an empty one-block kernel by the size of its
// parameter block: does a 4 KiB argument block cost the launch time that
// small collectives are bound by (issue 26)? The stream is synchronized
// every 512 launches, outside the timer, so the queue never fills.
//
//	go test -run XXX -bench GPULaunchParams ./runtime/cuda
func BenchmarkGPULaunchParams(b *testing.B) {
	if err := Init(); err != nil {
		b.Skip("no CUDA driver: " + err.Error())
	}
	d, err := GetDevice(0)
	if err != nil {
		b.Fatal(err)
	}
	c, err := d.PrimaryContext()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	m, err := c.LoadModule([]byte(emptyKernelsPTX()))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Unload()
	s, err := c.NewStream(true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	for _, n := range launchParamSizes {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			f, err := m.Function(fmt.Sprintf("ngEmpty%d", n))
			if err != nil {
				b.Fatal(err)
			}
			args := make([]byte, n)
			for i := 0; i < b.N; i++ {
				if i%512 == 511 {
					b.StopTimer()
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := s.Launch(f, Dim1(1), Dim1(32), 0, args); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestEmptyKernelsPTX checks the benchmark's PTX names one kernel per size
// with a parameter block of that size (no driver needed).
func TestEmptyKernelsPTX(t *testing.T) {
	ptx := emptyKernelsPTX()
	for _, n := range launchParamSizes {
		want := fmt.Sprintf(".entry ngEmpty%d(.param .align 16 .b8 p[%d])", n, n)
		if !strings.Contains(ptx, want) {
			t.Errorf("PTX lacks %q:\n%s", want, ptx)
		}
	}
}
