package bootstrap

import (
	"bufio"
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
	// helloCheckInRoots: rank → root i of several (JoinScalable); the
	// check-in followed by the index of the root and every root's id.
	helloCheckInRoots = 3
	// helloRootPeer: root → root of one scalable bootstrap; followed by
	// the sender's slice of the address table (msgSlice).
	helloRootPeer = 4

	msgQuery  = 'Q'
	msgTable  = 'T'
	msgStatus = 'S'
	msgReject = 'R'
	// msgAck: root → root, the slice arrived ('A' alone); rank → root,
	// the table arrived ('A' | rank u32 | token u64, see encodeAck).
	msgAck   = 'A'
	msgSlice = 'P' // root → root: 'P' | lo u32 | count u32 | count × (len u16 | addr)

	classUser = 0 // Send/Recv
	classColl = 1 // AllGather/Barrier ring steps
	// classAbandon: the sender's collective number tag failed; empty.
	classAbandon = 2
	// classLookup: "which address has rank tag?"; origin u32 | origin's
	// address. Each rank forwards it to its finger closest to tag; rank
	// tag answers the origin directly with classFound.
	classLookup = 3
	// classFound: the sender's (rank tag) listen address, answering a
	// classLookup.
	classFound = 4

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
// bodyWait. A body already buffered needs no deadline (most frames
// arrive whole: no timer is armed for them).
func readFrameConn(nc net.Conn, br *bufio.Reader, max int, bodyWait time.Duration, admit func(n int) error) ([]byte, error) {
	n, err := readFrameHeader(br, max)
	if err != nil {
		return nil, err
	}
	if err := admit(n); err != nil {
		return nil, err
	}
	if br.Buffered() >= n {
		return readFrameBody(br, n)
	}
	_ = nc.SetReadDeadline(time.Now().Add(bodyWait))
	b, err := readFrameBody(br, n)
	_ = nc.SetReadDeadline(time.Time{})
	return b, err
}

// rootReplyLimit is the largest reply the root sends to a rank of a
// communicator of nRanks ranks: its table (tableLen entries, each address
// at most maxAddrLen bytes) or its status (4 bytes per listed missing
// rank), whichever is larger.
func rootReplyLimit(nRanks int) int {
	return max(5+tableLen(nRanks)*tableEntryLimit, 22+4*maxListedMissing, 1+maxRejectLen)
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
	// token is the rank's random check-in token: the root hands each
	// rank the tokens of the ranks that may dial it, and a peer hello must
	// carry the sender's, so that a process that holds only the id cannot
	// speak for a rank. Zero in a root → root hello.
	token uint64
	addr  string // check-in only: the rank's listen address
	// helloCheckInRoots only: which root this is and every root.
	rootIndex int
	roots     []rootRef
}

// rootRef is one root of a scalable bootstrap, as its UniqueID names it.
type rootRef struct {
	magic uint64
	addr  string
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
	if h.kind == helloCheckIn || h.kind == helloCheckInRoots {
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.addr)))
		b = append(b, h.addr...)
	}
	if h.kind == helloCheckInRoots {
		b = binary.BigEndian.AppendUint16(b, uint16(h.rootIndex))
		b = binary.BigEndian.AppendUint16(b, uint16(len(h.roots)))
		for _, r := range h.roots {
			b = binary.BigEndian.AppendUint64(b, r.magic)
			b = binary.BigEndian.AppendUint16(b, uint16(len(r.addr)))
			b = append(b, r.addr...)
		}
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
	case helloCheckInRoots:
		var err error
		if h.addr, h.rootIndex, h.roots, err = decodeRoots(rest); err != nil {
			return h, fmt.Errorf("%w: check-in hello: %v", ErrBadMagic, err)
		}
	case helloRootPeer:
		if len(rest) != 0 {
			return h, fmt.Errorf("%w: root hello with %d trailing bytes", ErrBadMagic, len(rest))
		}
	case helloPeer:
		if len(rest) != 0 {
			return h, fmt.Errorf("%w: peer hello with %d trailing bytes", ErrBadMagic, len(rest))
		}
	default:
		return h, fmt.Errorf("%w: hello kind %d", ErrBadMagic, h.kind)
	}
	if (h.kind == helloCheckIn || h.kind == helloCheckInRoots) && len(h.addr) > maxAddrLen {
		return h, fmt.Errorf("%w: %d-byte address, limit %d", ErrBadMagic, len(h.addr), maxAddrLen)
	}
	if h.kind == helloRootPeer {
		if h.nRanks < 1 || h.nRanks > MaxRanks || h.rank >= min(h.nRanks, MaxRoots) {
			return h, fmt.Errorf("%w: root %d of a bootstrap of %d ranks", ErrBadMagic, h.rank, h.nRanks)
		}
		return h, nil
	}
	if h.nRanks < 1 || h.nRanks > MaxRanks || h.rank >= h.nRanks {
		return h, fmt.Errorf("%w: rank %d of %d", ErrBadMagic, h.rank, h.nRanks)
	}
	return h, nil
}

// tableEntry is one rank's line of the root's table: its listen address
// ("" when the receiver is only to check the rank's hellos) and its
// check-in token.
type tableEntry struct {
	addr  string
	token uint64
}

// tableEntryLimit bounds the encoding of one tableEntry.
const tableEntryLimit = 2 + maxAddrLen + 8

// tableLen is the number of entries of the table the root sends each rank
// of a bootstrap of n ranks: the rank's own, then those of its k =
// ⌈log2 n⌉ fingers (rank+2^j, with addresses), then those of the k ranks
// that dial it in the collectives (rank-2^j, tokens only).
func tableLen(n int) int { return 1 + 2*rounds(n) }

// decodeRoots parses the tail of a helloCheckInRoots: the rank's address,
// the root's index and the roots.
func decodeRoots(b []byte) (addr string, index int, roots []rootRef, err error) {
	str := func() (string, bool) {
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			return "", false
		}
		l := int(binary.BigEndian.Uint16(b))
		s := string(b[2 : 2+l])
		b = b[2+l:]
		return s, l <= maxAddrLen
	}
	var ok bool
	if addr, ok = str(); !ok || len(b) < 4 {
		return "", 0, nil, errors.New("malformed address")
	}
	index, n := int(binary.BigEndian.Uint16(b)), int(binary.BigEndian.Uint16(b[2:]))
	b = b[4:]
	if n < 2 || n > MaxRoots || index >= n {
		return "", 0, nil, fmt.Errorf("root %d of %d roots (want 2..%d roots)", index, n, MaxRoots)
	}
	roots = make([]rootRef, n)
	for i := range roots {
		if len(b) < 8 {
			return "", 0, nil, errors.New("truncated root list")
		}
		roots[i].magic = binary.BigEndian.Uint64(b)
		b = b[8:]
		if roots[i].addr, ok = str(); !ok {
			return "", 0, nil, errors.New("malformed root address")
		}
	}
	if len(b) != 0 {
		return "", 0, nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return addr, index, roots, nil
}

// encodeSlice encodes the entries (address and token) of ranks lo, lo+1,
// ... for another root.
func encodeSlice(lo int, entries []tableEntry) []byte {
	b := []byte{msgSlice}
	b = binary.BigEndian.AppendUint32(b, uint32(lo))
	t := encodeTable(entries)
	return append(b, t[1:]...)
}

// decodeSlice parses a slice from another root of a bootstrap of n ranks.
func decodeSlice(b []byte, n int) (lo int, entries []tableEntry, err error) {
	if len(b) < 9 || b[0] != msgSlice {
		return 0, nil, errors.New("bootstrap: malformed slice from a root")
	}
	lo, cnt := int(binary.BigEndian.Uint32(b[1:])), int(binary.BigEndian.Uint32(b[5:]))
	if lo >= n || cnt > n-lo {
		return 0, nil, fmt.Errorf("bootstrap: slice of %d ranks from rank %d, beyond %d ranks", cnt, lo, n)
	}
	entries, err = decodeTable(append([]byte{msgTable}, b[5:]...), cnt)
	return lo, entries, err
}

// sliceLimit bounds a slice frame for a bootstrap of n ranks.
func sliceLimit(n int) int { return 9 + n*tableEntryLimit }

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
	if len(b) < n*(2+8) {
		return bad("truncated") // before allocating for n entries
	}
	out := make([]tableEntry, n)
	for i := range out {
		if len(b) < 2 {
			return bad("truncated")
		}
		l := int(binary.BigEndian.Uint16(b))
		if l > maxAddrLen {
			return bad(fmt.Sprintf("%d-byte address, limit %d", l, maxAddrLen))
		}
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

// ackLen is the length of a rank's acknowledgement of its table.
const ackLen = 1 + 4 + 8

// encodeAck is rank's acknowledgement of its table, with its check-in
// token: the root stops once every rank of its slice sent one.
func encodeAck(rank int, token uint64) []byte {
	b := []byte{msgAck}
	b = binary.BigEndian.AppendUint32(b, uint32(rank))
	return binary.BigEndian.AppendUint64(b, token)
}

// decodeAck checks an acknowledgement received on the check-in
// connection of hello h: it must name h's rank and token.
func decodeAck(b []byte, h hello) error {
	if len(b) != ackLen || b[0] != msgAck {
		return fmt.Errorf("malformed acknowledgement: %d bytes starting %q, want %d starting 'A'", len(b), b[:min(len(b), 1)], ackLen)
	}
	rank, token := int(binary.BigEndian.Uint32(b[1:])), binary.BigEndian.Uint64(b[5:])
	if rank != h.rank {
		return fmt.Errorf("acknowledgement for rank %d on rank %d's check-in", rank, h.rank)
	}
	if token != h.token {
		return errors.New("acknowledgement with another token than the check-in's")
	}
	return nil
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
