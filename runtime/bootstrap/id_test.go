package bootstrap

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUniqueIDRoundTrip(t *testing.T) {
	for _, a := range []string{"127.0.0.1:29500", "[::1]:1234", "[fe80::1%eth0]:80", "10.1.2.3:65535"} {
		t.Run(a, func(t *testing.T) {
			ap := netip.MustParseAddrPort(a)
			id, err := newUniqueID(ap)
			require.NoError(t, err)
			s := id.String()
			assert.Len(t, s, 256)
			back, err := ParseUniqueID("  " + strings.ToUpper(s) + "\n")
			require.NoError(t, err)
			assert.Equal(t, id, back)
			magic, got, err := back.decode()
			require.NoError(t, err)
			assert.NotZero(t, magic)
			assert.Equal(t, ap, got)
			assert.Equal(t, a, id.Addr())

			js, err := json.Marshal(map[string]UniqueID{"id": id})
			require.NoError(t, err)
			var m map[string]UniqueID
			require.NoError(t, json.Unmarshal(js, &m))
			assert.Equal(t, id, m["id"])
		})
	}
	a, err := newUniqueID(netip.MustParseAddrPort("127.0.0.1:1"))
	require.NoError(t, err)
	b, err := newUniqueID(netip.MustParseAddrPort("127.0.0.1:1"))
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "magic must be random")
}

func TestParseUniqueIDErrors(t *testing.T) {
	good, err := newUniqueID(netip.MustParseAddrPort("127.0.0.1:5000"))
	require.NoError(t, err)
	gs := good.String()
	cases := map[string]struct{ in, want string }{
		"empty":    {"", `bootstrap: invalid unique id "": 0 characters, want 256 hexadecimal characters (128 bytes)`},
		"short":    {"abc", `"abc": 3 characters, want 256 hexadecimal characters`},
		"non-hex":  {"zz" + gs[2:], `want only hexadecimal digits 0-9, a-f`},
		"zero":     {strings.Repeat("0", 256), "zero magic"},
		"family":   {gs[:18] + "09" + gs[20:], "address family 9, want 4 or 6"},
		"tail":     {gs[:254] + "01", "nonzero byte at offset 127"},
		"too-long": {gs + "00", "258 characters"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseUniqueID(c.in)
			require.ErrorIs(t, err, ErrInvalidID)
			assert.ErrorContains(t, err, c.want)
		})
	}
	var id UniqueID
	require.ErrorIs(t, id.UnmarshalText([]byte("nope")), ErrInvalidID)
	assert.Equal(t, "", UniqueID{}.Addr())
}

func TestTimeoutErrorFormat(t *testing.T) {
	e := &TimeoutError{After: 2 * time.Second, Missing: []int{3}, NRanks: 4}
	assert.EqualError(t, e, "bootstrap: timed out after 2s waiting for ranks [3] of 4 to check in")
	assert.ErrorIs(t, e, ErrTimeout)
	many := make([]int, 100)
	for i := range many {
		many[i] = i
	}
	s := formatRanks(many)
	assert.True(t, strings.HasPrefix(s, "[0 1 2"), s)
	assert.Contains(t, s, "... (68 more) 84")
	assert.True(t, strings.HasSuffix(s, " 99]"), s)
}

// Junk in the bytes an address does not use is refused, so that several
// texts cannot name one root.
func TestParseUniqueIDCanonical(t *testing.T) {
	id, err := encodeID(0x1234, netip.MustParseAddrPort("10.0.0.1:5000"))
	require.NoError(t, err)
	_, err = ParseUniqueID(id.String())
	require.NoError(t, err)
	for _, off := range []int{16, 27, 28, 29, 44} {
		bad := id
		bad[off] = 0x5a
		_, err := ParseUniqueID(bad.String())
		require.ErrorIs(t, err, ErrInvalidID, "junk at offset %d", off)
	}
	id6, err := encodeID(0x1234, netip.MustParseAddrPort("[fe80::1%eth0]:5000"))
	require.NoError(t, err)
	_, err = ParseUniqueID(id6.String())
	require.NoError(t, err)
	bad := id6
	bad[29+5] = 'x' // past the 4-byte zone
	_, err = ParseUniqueID(bad.String())
	require.ErrorIs(t, err, ErrInvalidID)
	assert.ErrorContains(t, err, "offset 34")
}
