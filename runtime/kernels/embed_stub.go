//go:build !ncclgo_embed

package kernels

// embeddedImage returns nil: this binary was built without -tags
// ncclgo_embed.
func embeddedImage() []byte { return nil }
