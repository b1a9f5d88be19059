package transport

import (
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/generated"
	"github.com/ncclgo/ncclgo/runtime/graph"
)

// ImageSpec is what one rank's device image describes.
type ImageSpec struct {
	Rank, NRanks, NChannels int
	Rings                   [][]int      // per channel, the ring order (graph.Rings)
	Trees                   []graph.Tree // per channel
	Conns                   *Set         // this rank's connections
	// AbortFlag and ErrorFlag are the device addresses of the host-mapped
	// uint32 flags.
	AbortFlag, ErrorFlag uint64
	Sizes                Sizes
	// Direct lists, by rank, the device address of each rank's DIRECT
	// mailboxes (runtime/comm), or is nil where DIRECT cannot run; the
	// image holds a copy, which DevComm.Direct points to. DirectFlags
	// are DevComm.DirectFlags (generated.Direct* bits).
	Direct      []uint64
	DirectFlags uint32
	// DirectWindows asks for the DIRECT window table after Direct:
	// generated.DirectMaxWindows rows of NRanks zeroes, which the host
	// fills as windows are registered (Image.WindowTableOffset).
	DirectWindows bool
}

// Image is one rank's device image: the DevComm, then its channels, the
// channels' peer arrays and the rings' user ranks, with pointers into the
// image relative to its start until Relocate.
type Image struct {
	bytes  []byte
	chOff  int
	nch    int
	winOff int // the window table's offset, or 0
}

// imageAlign aligns each part of the image.
const imageAlign = 256

// BuildImage lays out spec's image.
func BuildImage(spec ImageSpec) (*Image, error) {
	if spec.NChannels > len(spec.Rings) || spec.NChannels > len(spec.Trees) {
		return nil, fmt.Errorf("transport: image of %d channels with %d rings and %d trees", spec.NChannels, len(spec.Rings), len(spec.Trees))
	}
	if spec.Conns == nil {
		return nil, fmt.Errorf("transport: image without connections")
	}
	up := func(x int) int { return (x + imageAlign - 1) / imageAlign * imageAlign }
	chOff := up(int(unsafe.Sizeof(generated.DevComm{})))
	peerOff := up(chOff + spec.NChannels*int(unsafe.Sizeof(generated.DevChannel{})))
	userOff := up(peerOff + spec.NChannels*spec.NRanks*int(unsafe.Sizeof(generated.DevPeer{})))
	directOff := up(userOff + spec.NChannels*spec.NRanks*4)
	if spec.Direct != nil && len(spec.Direct) != spec.NRanks {
		return nil, fmt.Errorf("transport: image with %d DIRECT mailboxes for %d ranks", len(spec.Direct), spec.NRanks)
	}
	if spec.DirectWindows && spec.Direct == nil {
		return nil, fmt.Errorf("transport: image with a DIRECT window table but no DIRECT mailboxes")
	}
	winOff, nWin := 0, 0
	if spec.DirectWindows {
		winOff, nWin = directOff+8*len(spec.Direct), generated.DirectMaxWindows*spec.NRanks
	}
	total := up(directOff + 8*len(spec.Direct) + 8*nWin)
	img := make([]byte, total)
	put := func(off int, p unsafe.Pointer, n uintptr) { copy(img[off:], unsafe.Slice((*byte)(p), n)) }
	dc := generated.DevComm{
		Rank: int32(spec.Rank), NRanks: int32(spec.NRanks), NChannels: int32(spec.NChannels),
		AbortFlag: spec.AbortFlag, ErrorFlag: spec.ErrorFlag,
		Channels: relocBit | uint64(chOff), BuffSizes: spec.Sizes,
	}
	if spec.Direct != nil {
		dc.Direct, dc.DirectFlags = relocBit|uint64(directOff), spec.DirectFlags
		put(directOff, unsafe.Pointer(&spec.Direct[0]), uintptr(8*len(spec.Direct)))
	}
	put(0, unsafe.Pointer(&dc), unsafe.Sizeof(dc))
	peerSize := int(unsafe.Sizeof(generated.DevPeer{}))
	for ch := range spec.NChannels {
		var dch generated.DevChannel
		dch.Id = uint32(ch)
		prev, next, index, users := graph.RingView(spec.Rings[ch], spec.Rank)
		if len(users) != spec.NRanks {
			return nil, fmt.Errorf("transport: channel %d's ring has %d ranks, want %d", ch, len(users), spec.NRanks)
		}
		uo := userOff + ch*spec.NRanks*4
		dch.Ring = generated.DevRing{Prev: int32(prev), Next: int32(next), Index: int32(index), UserRanks: relocBit | uint64(uo)}
		put(uo, unsafe.Pointer(&users[0]), uintptr(4*len(users)))
		t := spec.Trees[ch]
		dch.Tree = generated.DevTree{Up: int32(t.Up[spec.Rank]), Down: [3]int32{-1, -1, -1}, Depth: int32(t.Depth)}
		for i, d := range t.Down[spec.Rank] {
			if i < 3 {
				dch.Tree.Down[i] = int32(d)
			}
		}
		po := peerOff + ch*spec.NRanks*peerSize
		dch.Peers = relocBit | uint64(po)
		for p := range spec.NRanks {
			var dp generated.DevPeer
			dp.Send = spec.Conns.Send[Key{Channel: ch, Peer: p}]
			dp.Recv = spec.Conns.Recv[Key{Channel: ch, Peer: p}]
			put(po+p*peerSize, unsafe.Pointer(&dp), uintptr(peerSize))
		}
		put(chOff+ch*int(unsafe.Sizeof(dch)), unsafe.Pointer(&dch), unsafe.Sizeof(dch))
	}
	return &Image{bytes: img, chOff: chOff, nch: spec.NChannels, winOff: winOff}, nil
}

// relocBit marks image-relative pointers (offsets with this high bit set).
const relocBit = uint64(1) << 63

// Size is the image's size in bytes.
func (m *Image) Size() int { return len(m.bytes) }

// WindowTableOffset is the byte offset in the image of the DIRECT window
// table (ImageSpec.DirectWindows): row w, entry r is at
// WindowTableOffset() + 8*(w*NRanks + r). It is 0 when there is none.
func (m *Image) WindowTableOffset() int { return m.winOff }

// Relocate returns the image's bytes with its internal pointers made
// absolute for an image copied to device address base.
func (m *Image) Relocate(base uint64) []byte {
	img := append([]byte(nil), m.bytes...)
	fix := func(off int) {
		p := (*uint64)(unsafe.Pointer(&img[off]))
		if *p&relocBit != 0 {
			*p = base + (*p &^ relocBit)
		}
	}
	fix(int(unsafe.Offsetof(generated.DevComm{}.Channels)))
	fix(int(unsafe.Offsetof(generated.DevComm{}.Direct))) // 0 (no relocBit) stays 0
	for ch := range m.nch {
		off := m.chOff + ch*int(unsafe.Sizeof(generated.DevChannel{}))
		fix(off + int(unsafe.Offsetof(generated.DevChannel{}.Ring)) + int(unsafe.Offsetof(generated.DevRing{}.UserRanks)))
		fix(off + int(unsafe.Offsetof(generated.DevChannel{}.Peers)))
	}
	return img
}
