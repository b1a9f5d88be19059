//go:build !ncclgo_nvml

package topo

func nvmlLinks(string) ([]string, error) {
	return nil, ErrNoNVML
}
