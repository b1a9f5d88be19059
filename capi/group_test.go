package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo"
)

func TestPick(t *testing.T) {
	// Outside a group a call runs on the communicator, in one it queues.
	assert.Equal(t, "now", pick(nil, "now", "queued"))
	assert.Equal(t, "queued", pick(&ncclgo.Group{}, "now", "queued"))
	// A nil group's method value is safe to take (it is never called).
	var g *ncclgo.Group
	f := pick(g, (*ncclgo.Comm).AllReduce, g.AllReduce)
	assert.NotNil(t, f)
}
