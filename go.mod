module github.com/ncclgo/ncclgo

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/dave/jennifer v1.7.1
	github.com/spf13/pflag v1.1.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/term v0.48.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
