package bootstrap

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// UniqueIDBytes is the size of a UniqueID, NCCL's NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID identifies one bootstrap: the root's TCP address and a random
// 64-bit magic that every connection must present. It has the size of
// NCCL's ncclUniqueId. Layout (big-endian):
//
//	[0:8]   magic (never zero)
//	[8]     layout version (1)
//	[9]     address family: 4 or 6
//	[10:12] port
//	[12:28] IP address (IPv4 in the first 4 bytes)
//	[28]    IPv6 zone length (0..16)
//	[29:45] IPv6 zone (interface name), for link-local addresses
//	[45:]   zero
//
// The zero UniqueID is invalid.
type UniqueID [UniqueIDBytes]byte

const (
	idVersion    = 1
	idMaxZoneLen = 16
	idTextLen    = 2 * UniqueIDBytes
)

// newUniqueID returns an id for addr with a fresh random magic.
func newUniqueID(addr netip.AddrPort) (UniqueID, error) {
	var id UniqueID
	var m [8]byte
	for {
		if _, err := rand.Read(m[:]); err != nil {
			return id, fmt.Errorf("bootstrap: random magic: %w", err)
		}
		if binary.BigEndian.Uint64(m[:]) != 0 {
			break
		}
	}
	return encodeID(binary.BigEndian.Uint64(m[:]), addr)
}

func encodeID(magic uint64, addr netip.AddrPort) (UniqueID, error) {
	var id UniqueID
	ip := addr.Addr()
	if !ip.IsValid() || addr.Port() == 0 {
		return id, fmt.Errorf("%w: address %v has no IP or port", ErrInvalidID, addr)
	}
	binary.BigEndian.PutUint64(id[0:8], magic)
	id[8] = idVersion
	binary.BigEndian.PutUint16(id[10:12], addr.Port())
	if ip.Is4() || ip.Is4In6() {
		id[9] = 4
		a := ip.Unmap().As4()
		copy(id[12:16], a[:])
	} else {
		id[9] = 6
		a := ip.As16()
		copy(id[12:28], a[:])
		zone := ip.Zone()
		if len(zone) > idMaxZoneLen {
			return id, fmt.Errorf("%w: IPv6 zone %q longer than %d bytes", ErrInvalidID, zone, idMaxZoneLen)
		}
		id[28] = byte(len(zone))
		copy(id[29:29+idMaxZoneLen], zone)
	}
	return id, nil
}

// decode returns the magic and the root address, or an error wrapping
// ErrInvalidID.
func (id UniqueID) decode() (uint64, netip.AddrPort, error) {
	magic := binary.BigEndian.Uint64(id[0:8])
	if magic == 0 {
		return 0, netip.AddrPort{}, fmt.Errorf("%w: zero magic (an id must come from NewRoot or ParseUniqueID)", ErrInvalidID)
	}
	if id[8] != idVersion {
		return 0, netip.AddrPort{}, fmt.Errorf("%w: layout version %d, want %d", ErrInvalidID, id[8], idVersion)
	}
	port := binary.BigEndian.Uint16(id[10:12])
	if port == 0 {
		return 0, netip.AddrPort{}, fmt.Errorf("%w: port 0", ErrInvalidID)
	}
	for i := 29 + idMaxZoneLen; i < UniqueIDBytes; i++ {
		if id[i] != 0 {
			return 0, netip.AddrPort{}, fmt.Errorf("%w: nonzero byte at offset %d of the reserved tail", ErrInvalidID, i)
		}
	}
	var ip netip.Addr
	switch id[9] {
	case 4:
		ip = netip.AddrFrom4([4]byte(id[12:16]))
		if id[28] != 0 {
			return 0, netip.AddrPort{}, fmt.Errorf("%w: IPv4 address with a zone", ErrInvalidID)
		}
	case 6:
		ip = netip.AddrFrom16([16]byte(id[12:28]))
		zl := int(id[28])
		if zl > idMaxZoneLen {
			return 0, netip.AddrPort{}, fmt.Errorf("%w: zone length %d > %d", ErrInvalidID, zl, idMaxZoneLen)
		}
		if zl > 0 {
			ip = ip.WithZone(string(id[29 : 29+zl]))
		}
	default:
		return 0, netip.AddrPort{}, fmt.Errorf("%w: address family %d, want 4 or 6", ErrInvalidID, id[9])
	}
	ap := netip.AddrPortFrom(ip, port)
	// Bytes the address does not use must be zero, so that one root has
	// one id (and one text form).
	if canon, err := encodeID(magic, ap); err != nil || canon != id {
		for i := range id {
			if canon[i] != id[i] {
				return 0, netip.AddrPort{}, fmt.Errorf("%w: nonzero byte at offset %d, unused by the %s address", ErrInvalidID, i, ap)
			}
		}
		return 0, netip.AddrPort{}, fmt.Errorf("%w: %v", ErrInvalidID, err)
	}
	return magic, ap, nil
}

// Addr returns the root's address ("ip:port" or "[ipv6]:port"), or "" if the
// id is invalid.
func (id UniqueID) Addr() string {
	_, a, err := id.decode()
	if err != nil {
		return ""
	}
	return a.String()
}

// String returns the id as 256 lowercase hexadecimal characters, the form
// ParseUniqueID reads.
func (id UniqueID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText implements encoding.TextMarshaler with the String form.
func (id UniqueID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseUniqueID.
func (id *UniqueID) UnmarshalText(b []byte) error {
	v, err := ParseUniqueID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseUniqueID parses the text form produced by UniqueID.String (256
// hexadecimal characters, either case; surrounding white space is ignored)
// and checks that it decodes to a root address and a nonzero magic. Errors
// wrap ErrInvalidID and quote the input.
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	t := strings.TrimSpace(s)
	if len(t) != idTextLen {
		return id, fmt.Errorf("%w %s: %d characters, want %d hexadecimal characters (%d bytes) as printed by UniqueID.String",
			ErrInvalidID, quoteShort(s), len(t), idTextLen, UniqueIDBytes)
	}
	if _, err := hex.Decode(id[:], []byte(t)); err != nil {
		return UniqueID{}, fmt.Errorf("%w %s: %v; want only hexadecimal digits 0-9, a-f", ErrInvalidID, quoteShort(s), err)
	}
	if _, _, err := id.decode(); err != nil {
		return UniqueID{}, fmt.Errorf("%w (input %s)", err, quoteShort(s))
	}
	return id, nil
}

// quoteShort quotes s, eliding the middle of long inputs.
func quoteShort(s string) string {
	const max = 48
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...%q", s[:max/2], s[len(s)-max/2:])
}
