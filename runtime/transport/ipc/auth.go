package ipc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Secret authenticates the connections to one Server or Watcher: a
// process must prove it holds the secret before it is served or watched.
// Each Server and Watcher makes its own at start; its Addr carries it,
// and the ranks of a communicator exchange their Addrs over the bootstrap
// only, so that another process of the same user, which can list the
// abstract socket names in /proc/net/unix, gets nothing from a server
// and cannot make a watcher report a rank lost.
type Secret [32]byte

// newSecret returns a fresh random secret.
func newSecret() Secret {
	var s Secret
	_, _ = rand.Read(s[:]) // crypto/rand.Read does not fail (Go 1.24)
	return s
}

// ErrAuth is wrapped by the errors of a connection whose peer did not
// prove it holds the secret (or is not of this user).
var ErrAuth = errors.New("ipc: peer failed authentication")

// formatAddr is the text form of an address: the socket name, '#', and
// the secret in hexadecimal. It is a credential: send it over the
// bootstrap only, never log it.
func formatAddr(name string, s Secret) string { return name + "#" + hex.EncodeToString(s[:]) }

// parseAddr splits what formatAddr made.
func parseAddr(addr string) (string, Secret, error) {
	var s Secret
	i := strings.LastIndexByte(addr, '#')
	if i < 0 {
		return "", s, fmt.Errorf("ipc: address %q carries no secret (pass Server.Addr or Watcher.Addr, not Name)", addr)
	}
	name, h := addr[:i], addr[i+1:]
	if n, err := hex.Decode(s[:], []byte(h)); err != nil || n != len(s) || len(h) != 2*len(s) {
		return "", Secret{}, fmt.Errorf("ipc: address %q: the secret must be %d hexadecimal digits", name, 2*len(s))
	}
	return name, s, nil
}

// Handshake, after the accepting side checked the dialer's user:
//
//	acceptor → dialer: "NGI1" nonceA[32]
//	dialer → acceptor: nonceD[32] payload mac(secret, 'D', nonceA, nonceD, payload)
//	acceptor → dialer: mac(secret, 'A', nonceA, nonceD, payload)
//
// so that each side proves to the other that it holds the secret, without
// sending it, and the payload (the watcher's rank) cannot be forged.
const (
	authMagic = "NGI1"
	nonceLen  = 32
	macLen    = sha256.Size
)

func authMAC(s Secret, role byte, nonceA, nonceD, payload []byte) []byte {
	m := hmac.New(sha256.New, s[:])
	m.Write([]byte{role})
	m.Write(nonceA)
	m.Write(nonceD)
	m.Write(payload)
	return m.Sum(nil)
}

// acceptAuth runs the acceptor's side of the handshake on c, reading a
// payload of payloadLen bytes, within deadline. It returns the payload
// once the dialer proved it holds s; the caller then sends the returned
// proof (possibly after a byte of its own) to finish the handshake.
func acceptAuth(c *net.UnixConn, s Secret, payloadLen int, deadline time.Time) (payload, proof []byte, err error) {
	if err := peerUser(c); err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(deadline)
	nonceA := make([]byte, nonceLen)
	_, _ = rand.Read(nonceA)
	if _, err := c.Write(append([]byte(authMagic), nonceA...)); err != nil {
		return nil, nil, err
	}
	msg := make([]byte, nonceLen+payloadLen+macLen)
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, nil, err
	}
	nonceD, payload, mac := msg[:nonceLen], msg[nonceLen:nonceLen+payloadLen], msg[nonceLen+payloadLen:]
	if !hmac.Equal(mac, authMAC(s, 'D', nonceA, nonceD, payload)) {
		return nil, nil, fmt.Errorf("%w: wrong proof of the secret", ErrAuth)
	}
	_ = c.SetDeadline(time.Time{})
	return payload, authMAC(s, 'A', nonceA, nonceD, payload), nil
}

// dialAuth runs the dialer's side of the handshake up to sending its
// proof and payload; it returns the proof the acceptor must answer with.
func dialAuth(c *net.UnixConn, s Secret, payload []byte) (want []byte, err error) {
	if err := peerUser(c); err != nil {
		return nil, err
	}
	ch := make([]byte, len(authMagic)+nonceLen)
	if _, err := io.ReadFull(c, ch); err != nil {
		return nil, err
	}
	if string(ch[:len(authMagic)]) != authMagic {
		return nil, fmt.Errorf("%w: the listener is no ncclgo IPC socket (greeting %q)", ErrAuth, ch[:len(authMagic)])
	}
	nonceA := ch[len(authMagic):]
	nonceD := make([]byte, nonceLen)
	_, _ = rand.Read(nonceD)
	msg := append(append(append([]byte{}, nonceD...), payload...), authMAC(s, 'D', nonceA, nonceD, payload)...)
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	return authMAC(s, 'A', nonceA, nonceD, payload), nil
}

// checkProof reads the acceptor's proof from c and compares it with want.
func checkProof(c *net.UnixConn, want []byte) error {
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !hmac.Equal(got, want) {
		return fmt.Errorf("%w: the listener does not hold the secret", ErrAuth)
	}
	return nil
}

// peerUser checks that the process at the other end of c runs as this
// user (SO_PEERCRED).
func peerUser(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("%w: reading its credentials: %v", ErrAuth, cerr)
	}
	if cred.Uid != uint32(os.Getuid()) {
		return fmt.Errorf("%w: pid %d runs as user %d, this process as %d", ErrAuth, cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}
