package ncclgo

import (
	"fmt"

	"github.com/ncclgo/ncclgo/runtime/bootstrap"
)

// UniqueID identifies a communicator while its ranks initialize: one
// process gets it from GetUniqueID (or StartRoot) and hands it to every
// rank. It holds the bootstrap root's address and a random magic, in the
// 128 bytes of NCCL's ncclUniqueId; its String form travels as text, and
// ParseUniqueID reads it back. The zero UniqueID is invalid.
type UniqueID [128]byte // converts to and from the bootstrap's id, of the same size

// String returns the id as 256 lowercase hexadecimal characters, the form
// ParseUniqueID reads.
func (id UniqueID) String() string { return bootstrap.UniqueID(id).String() }

// MarshalText implements encoding.TextMarshaler with the String form.
func (id UniqueID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it reads the String
// form, as ParseUniqueID does.
func (id *UniqueID) UnmarshalText(b []byte) error {
	v, err := bootstrap.ParseUniqueID(string(b))
	if err != nil {
		return err
	}
	*id = UniqueID(v)
	return nil
}

// ParseUniqueID reads a UniqueID from the text form UniqueID.String
// produces, as it travels between processes (an environment variable, a
// command line, a file): 256 hexadecimal characters, either case,
// surrounding white space ignored. It fails with an error matching
// ErrInvalidID that names what is wrong.
func ParseUniqueID(s string) (UniqueID, error) {
	id, err := bootstrap.ParseUniqueID(s)
	if err != nil {
		return UniqueID{}, fmt.Errorf("ncclgo: ParseUniqueID: %w", err)
	}
	return UniqueID(id), nil
}
