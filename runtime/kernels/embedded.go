//go:build ncclgo_embed

package kernels

import _ "embed"

// The Makefile copies the built fatbin here before `go build -tags
// ncclgo_embed`.
//
//go:embed ncclgo.fatbin
var embedded []byte

// embeddedImage returns the fatbin compiled into the binary.
func embeddedImage() []byte { return embedded }
