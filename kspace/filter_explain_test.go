package kspace

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWhyEmpty(t *testing.T) {
	for pattern, want := range map[string]string{
		"AllReduce f32":                    `AllReduce needs 5 fields ("AllReduce RedOp Type Algo Proto"), the pattern has 2`,
		"AllReduce Sum fp32 * *":           `unknown type "fp32": valid types are i8, u8, i32`,
		"AllReduce Sum (fp32|fp16) * *":    `unknown type "fp32"`,
		"Allreduc * * * *":                 `unknown collective "Allreduc": valid collectives are Broadcast`,
		"AllGather RING LL8|SendRecv *":    `"SendRecv *": SendRecv needs 1 field ("SendRecv"), the pattern has 2`,
		"AllGather TREE LL":                `AllGather has no algorithm TREE: its algorithms are`,
		"AllReduce Sum f32 RING LL256":     `unknown protocol "LL256": valid protocols are LL, LL128, SIMPLE`,
		"AllReduce SumPostDiv f32 RING *":  "every combination it names is invalid",
		"(AllReduce Sum|Reduce Sum) x * *": "ncclgen list",
	} {
		f, err := ParseFilter(pattern)
		require.NoError(t, err, pattern)
		_, err = NewSpace(f)
		require.ErrorIs(t, err, ErrEmptyFilter, pattern)
		assert.Contains(t, f.WhyEmpty(), want, pattern)
	}
}

func TestFilterLengthCap(t *testing.T) {
	_, err := ParseFilter(strings.Repeat("*", 100<<10))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "limited to 4096 bytes")
	_, err = ParseFilter(strings.Repeat("(", 2000) + "SendRecv" + strings.Repeat(")", 2000))
	assert.NoError(t, err)
}
