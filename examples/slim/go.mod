module example.com/slim

go 1.26.8

require github.com/ncclgo/ncclgo v0.0.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/dave/jennifer v1.7.1 // indirect
	github.com/spf13/pflag v1.1.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
)

// ncclgen is a tool of this module: go.sum then covers what
// `go run github.com/ncclgo/ncclgo/cmd/ncclgen` (the go:generate line) needs.
tool github.com/ncclgo/ncclgo/cmd/ncclgen

replace github.com/ncclgo/ncclgo => ../..
