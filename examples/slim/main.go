// Command slim shows a program that ships its own slim kernel set: go
// generate builds the kernels it needs from ncclgo's sources (in the module
// cache, read-only), go:embed puts them in the binary, and
// Options.KernelImageBytes hands them to ncclgo.
//
// It runs AllReduce Sum in f32 and bf16 on two ranks and checks the
// results, then calls AllGather, which the set leaves out, and prints the
// error that names the missing function and the set's filter.
//
//	go generate   # needs nvcc (CUDA_HOME, NVCC or PATH)
//	go build && ./slim -devices 0,1
//
// A binary built without nvcc (kernels.fatbin empty) takes the set at run
// time: ./slim -fatbin kernels.fatbin.
package main

//go:generate go run github.com/ncclgo/ncclgo/cmd/ncclgen build --arch sm_90 --only "AllReduce Sum (f32|bf16) * *" --out kernels.fatbin

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo"
	"github.com/ncclgo/ncclgo/runtime/cuda"
)

//go:embed kernels.fatbin
var kernelSet []byte

func main() {
	devs := flag.String("devices", "0,0", "the ranks' devices, comma separated (0,0: two ranks sharing GPU 0)")
	fatbin := flag.String("fatbin", "", "kernel set file to use instead of the embedded one")
	count := flag.Int("count", 1<<20, "elements per rank")
	flag.Parse()
	if err := run(*devs, *fatbin, *count); err != nil {
		fmt.Fprintln(os.Stderr, "slim:", err)
		os.Exit(1)
	}
}

func run(devList, fatbin string, count int) error {
	var devices []int
	for _, s := range strings.Split(devList, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-devices %q: %w", devList, err)
		}
		devices = append(devices, d)
	}
	set := kernelSet
	if fatbin != "" {
		// Read it as go:embed would have: the same option takes the bytes.
		b, err := os.ReadFile(fatbin)
		if err != nil {
			return err
		}
		set = b
	}
	if len(set) == 0 {
		return errors.New("this binary embeds no kernel set (kernels.fatbin was empty when it was built): run `go generate` where nvcc is installed and rebuild, or pass -fatbin FILE")
	}
	opts := &ncclgo.Options{KernelImageBytes: set}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	comms, err := ncclgo.InitAll(ctx, devices, opts)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range comms {
			_ = c.Destroy()
		}
	}()
	ranks, err := setup(comms, count)
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range ranks {
			r.free()
		}
	}()
	for _, ty := range []ncclgo.DataType{ncclgo.Float32, ncclgo.Bfloat16} {
		if err := allReduce(comms, ranks, ty, count); err != nil {
			return err
		}
	}
	// AllGather is not in the set: the call fails, naming it and the filter.
	err = group(func(g *ncclgo.Group) error {
		for i, c := range comms {
			if err := g.AllGather(c, ranks[i].send, ranks[i].recv, count/len(comms), ncclgo.Float32, ranks[i].stream); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		return errors.New("AllGather ran, but the kernel set should not have it")
	}
	fmt.Printf("AllGather: %v\n", err)
	return nil
}

// group runs fn's calls as one group: every rank's call launches together.
func group(fn func(g *ncclgo.Group) error) error {
	g := ncclgo.NewGroup()
	if err := fn(g); err != nil {
		g.Discard()
		return err
	}
	return g.End()
}

// rank is one rank's buffers and stream.
type rank struct {
	ctx        *cuda.Context
	stream     *cuda.Stream
	send, recv cuda.DevicePtr
}

func (r *rank) free() {
	_ = r.stream.Destroy()
	_ = r.ctx.MemFree(r.send)
	_ = r.ctx.MemFree(r.recv)
	_ = r.ctx.Release()
}

func setup(comms []*ncclgo.Comm, count int) ([]*rank, error) {
	var ranks []*rank
	for _, c := range comms {
		dev, err := cuda.GetDevice(c.Device())
		if err != nil {
			return ranks, err
		}
		r := &rank{}
		if r.ctx, err = dev.PrimaryContext(); err != nil {
			return ranks, err
		}
		if r.stream, err = r.ctx.NewStream(true); err != nil {
			return ranks, err
		}
		if r.send, err = r.ctx.MemAlloc(uint64(4 * count)); err != nil {
			return ranks, err
		}
		if r.recv, err = r.ctx.MemAlloc(uint64(4 * count)); err != nil {
			return ranks, err
		}
		ranks = append(ranks, r)
	}
	return ranks, nil
}

// value is rank r's element i: small integers, exact in bf16 and in sums.
func value(r, i int) float32 { return float32(r + 1 + i%7) }

func encode(ty ncclgo.DataType, v []float32) []byte {
	if ty == ncclgo.Float32 {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	}
	out := make([]byte, 2*len(v))
	for i, x := range v {
		b := math.Float32bits(x) >> 16 // exact: the values need 8 bits of mantissa
		out[2*i], out[2*i+1] = byte(b), byte(b>>8)
	}
	return out
}

func decode(ty ncclgo.DataType, b []byte, i int) float32 {
	if ty == ncclgo.Float32 {
		return math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return math.Float32frombits((uint32(b[2*i]) | uint32(b[2*i+1])<<8) << 16)
}

func allReduce(comms []*ncclgo.Comm, ranks []*rank, ty ncclgo.DataType, count int) error {
	name := map[ncclgo.DataType]string{ncclgo.Float32: "f32", ncclgo.Bfloat16: "bf16"}[ty]
	for r, rk := range ranks {
		v := make([]float32, count)
		for i := range v {
			v[i] = value(r, i)
		}
		b := encode(ty, v)
		if err := rk.ctx.MemcpyHtoD(rk.send, unsafe.Pointer(&b[0]), uint64(len(b))); err != nil {
			return err
		}
	}
	start := time.Now()
	err := group(func(g *ncclgo.Group) error {
		for r, c := range comms {
			if err := g.AllReduce(c, ranks[r].send, ranks[r].recv, count, ty, ncclgo.Sum, ranks[r].stream); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("AllReduce %s: %w", name, err)
	}
	for _, rk := range ranks {
		if err := rk.stream.Synchronize(); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	size := 4
	if ty == ncclgo.Bfloat16 {
		size = 2
	}
	for r, rk := range ranks {
		b := make([]byte, size*count)
		if err := rk.ctx.MemcpyDtoH(unsafe.Pointer(&b[0]), rk.recv, uint64(len(b))); err != nil {
			return err
		}
		for i := range count {
			var want float32
			for q := range ranks {
				want += value(q, i)
			}
			if got := decode(ty, b, i); got != want {
				return fmt.Errorf("AllReduce %s: rank %d element %d is %v, want %v", name, r, i, got, want)
			}
		}
	}
	fmt.Printf("AllReduce Sum %s: %d ranks × %d elements correct (%v)\n", name, len(ranks), count, elapsed.Round(time.Microsecond))
	return nil
}
