package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Frame and message constants; see the package documentation.
const (
	helloCheckIn = 1 // rank → root
	helloPeer    = 2 // rank → rank

	msgQuery  = 'Q'
	msgTable  = 'T'
	msgStatus = 'S'
	msgReject = 'R'

	classUser = 0 // Send/Recv
	classColl = 1 // AllGather/Barrier ring steps
	// classAbandon: the sender's collective number tag failed; empty.
	classAbandon = 2

	// MaxMessageSize is the ceiling of Options.MaxMessageSize.
	MaxMessageSize = 1 << 30
	msgHeader      = 1 + 8
)

// writeFrame writes one frame made of the concatenation of parts, with a
// single writev where the platform has it.
func writeFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxMessageSize+msgHeader {
		return fmt.Errorf("bootstrap: frame of %d bytes exceeds the %d byte limit", n, MaxMessageSize+msgHeader)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	bufs := make(net.Buffers, 0, len(parts)+1)
	bufs = append(bufs, hdr[:])
	for _, p := range parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	_, err := bufs.WriteTo(w)
	return err
}

var errFrameTooLong = errors.New("frame too long")

// readChunk bounds each allocation while a frame's body arrives, so that a
// length prefix alone never reserves more memory than was received.
const readChunk = 1 << 20

// readFrame reads one frame of at most max payload bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	n, err := readFrameHeader(r, max)
	if err != nil {
		return nil, err
	}
	return readFrameBody(r, n)
}

// readFrameHeader reads a frame's length prefix and checks it against max.
func readFrameHeader(r io.Reader, max int) (int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", errFrameTooLong, n, max)
	}
	return int(n), nil
}

// readFrameBody reads n bytes, growing the buffer as they arrive.
func readFrameBody(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		k := min(n-len(buf), readChunk)
		if cap(buf)-len(buf) < k {
			buf = append(buf, make([]byte, k)...)[:len(buf)]
		}
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// readFrameConn reads one frame from nc (through br) of at most max
// bytes, if admit accepts its length: the length prefix may take as long
// as it takes, but once it has arrived the body must follow within
// bodyWait.
func readFrameConn(nc net.Conn, br io.Reader, max int, bodyWait time.Duration, admit func(n int) error) ([]byte, error) {
	n, err := readFrameHeader(br, max)
	if err != nil {
		return nil, err
	}
	if err := admit(n); err != nil {
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(bodyWait))
	b, err := readFrameBody(br, n)
	_ = nc.SetReadDeadline(time.Time{})
	return b, err
}

// rootReplyLimit is the largest reply the root sends to a communicator of
// nRanks ranks: its address table (each address at most maxAddrLen bytes)
// or its status (4 bytes per listed missing rank), whichever is larger.
func rootReplyLimit(nRanks int) int {
	return max(5+nRanks*(2+maxAddrLen+8), 22+4*maxListedMissing, 1+maxRejectLen)
}

// Limits of the check-in: an address is "[ipv6%zone]:port"; a rejection
// carries a short reason.
const (
	maxAddrLen   = 128
	maxRejectLen = 512
)

// hello is the first frame on every connection.
type hello struct {
	magic  uint64
	kind   byte
	rank   int
	nRanks int
	// token is the rank's random check-in token: the root hands every
	// rank the table of tokens, and a peer hello must carry the sender's,
	// so that a process that holds only the id cannot speak for a rank.
	token uint64
	addr  string // check-in only: the rank's listen address
}

// helloHeader is the size of a hello without its address.
const helloHeader = 25

func (h hello) encode() []byte {
	b := make([]byte, 0, helloHeader+2+len(h.addr))
	b = binary.BigEndian.AppendUint64(b, h.magic)
	b = append(b, h.kind)
	b = binary.BigEndian.AppendUint32(b, uint32(h.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(h.nRanks))
	b = binary.BigEndian.AppendUint64(b, h.token)
	if h.kind == helloCheckIn {
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.addr)))
		b = append(b, h.addr...)
	}
	return b
}

// decodeHello parses and checks a hello against the expected magic. Every
// failure wraps ErrBadMagic.
func decodeHello(b []byte, magic uint64) (hello, error) {
	var h hello
	if len(b) < helloHeader {
		return h, fmt.Errorf("%w: %d-byte hello, want at least %d", ErrBadMagic, len(b), helloHeader)
	}
	h.magic = binary.BigEndian.Uint64(b)
	if h.magic != magic {
		return h, fmt.Errorf("%w: magic %#016x", ErrBadMagic, h.magic)
	}
	h.kind = b[8]
	h.rank = int(binary.BigEndian.Uint32(b[9:]))
	h.nRanks = int(binary.BigEndian.Uint32(b[13:]))
	h.token = binary.BigEndian.Uint64(b[17:])
	rest := b[helloHeader:]
	switch h.kind {
	case helloCheckIn:
		if len(rest) < 2 || len(rest) != 2+int(binary.BigEndian.Uint16(rest)) {
			return h, fmt.Errorf("%w: check-in hello with a malformed address", ErrBadMagic)
		}
		h.addr = string(rest[2:])
	case helloPeer:
		if len(rest) != 0 {
			return h, fmt.Errorf("%w: peer hello with %d trailing bytes", ErrBadMagic, len(rest))
		}
	default:
		return h, fmt.Errorf("%w: hello kind %d", ErrBadMagic, h.kind)
	}
	if h.kind == helloCheckIn && len(h.addr) > maxAddrLen {
		return h, fmt.Errorf("%w: %d-byte address, limit %d", ErrBadMagic, len(h.addr), maxAddrLen)
	}
	if h.nRanks < 1 || h.nRanks > MaxRanks || h.rank >= h.nRanks {
		return h, fmt.Errorf("%w: rank %d of %d", ErrBadMagic, h.rank, h.nRanks)
	}
	return h, nil
}

// tableEntry is one rank's line of the root's table.
type tableEntry struct {
	addr  string
	token uint64
}

func encodeTable(t []tableEntry) []byte {
	b := []byte{msgTable}
	b = binary.BigEndian.AppendUint32(b, uint32(len(t)))
	for _, e := range t {
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.addr)))
		b = append(b, e.addr...)
		b = binary.BigEndian.AppendUint64(b, e.token)
	}
	return b
}

func decodeTable(b []byte, n int) ([]tableEntry, error) {
	bad := func(why string) ([]tableEntry, error) {
		return nil, fmt.Errorf("bootstrap: malformed address table from root: %s", why)
	}
	if len(b) < 5 || b[0] != msgTable {
		return bad("short")
	}
	if got := int(binary.BigEndian.Uint32(b[1:])); got != n {
		return bad(fmt.Sprintf("%d entries for %d ranks", got, n))
	}
	b = b[5:]
	out := make([]tableEntry, n)
	for i := range out {
		if len(b) < 2 {
			return bad("truncated")
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+l+8 {
			return bad("truncated")
		}
		out[i] = tableEntry{addr: string(b[2 : 2+l]), token: binary.BigEndian.Uint64(b[2+l:])}
		b = b[2+l+8:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return out, nil
}

// maxListedMissing bounds the ranks a status lists by number; the others
// are only counted, so that a query costs the root the same whatever
// nRanks a check-in claimed.
const maxListedMissing = 64

// status is the root's answer to a query, or its final word on a timeout.
type status struct {
	final    bool
	afterMS  uint64
	nRanks   int
	nMissing int   // how many ranks are missing
	missing  []int // the first of them, at most maxListedMissing
}

func (s status) encode() []byte {
	b := []byte{msgStatus, 0}
	if s.final {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, s.afterMS)
	b = binary.BigEndian.AppendUint32(b, uint32(s.nRanks))
	b = binary.BigEndian.AppendUint32(b, uint32(s.nMissing))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.missing)))
	for _, r := range s.missing {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

func decodeStatus(b []byte) (status, error) {
	var s status
	if len(b) < 22 || b[0] != msgStatus {
		return s, errors.New("bootstrap: malformed status from root")
	}
	s.final = b[1] == 1
	s.afterMS = binary.BigEndian.Uint64(b[2:])
	s.nRanks = int(binary.BigEndian.Uint32(b[10:]))
	s.nMissing = int(binary.BigEndian.Uint32(b[14:]))
	n := int(binary.BigEndian.Uint32(b[18:]))
	if n > maxListedMissing || n > s.nMissing || len(b) != 22+4*n {
		return s, errors.New("bootstrap: malformed status from root")
	}
	s.missing = make([]int, n)
	for i := range s.missing {
		s.missing[i] = int(binary.BigEndian.Uint32(b[22+4*i:]))
	}
	return s, nil
}

// timeoutError is the *TimeoutError that s reports, for op, after after.
func (s status) timeoutError(op string, after time.Duration) *TimeoutError {
	te := &TimeoutError{Op: op, After: after, Missing: s.missing, NRanks: s.nRanks}
	if s.nMissing > len(s.missing) {
		te.NMissing = s.nMissing
	}
	return te
}
