package nvbuild

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadArch is wrapped by errors about unknown or unsupported target archs.
var ErrBadArch = errors.New("bad target arch")

// DefaultArch is the target when none is given and no GPU is detected.
const DefaultArch = "sm_90"

// KnownArches are the SASS targets Build accepts, oldest first. Whether the
// nvcc at hand supports one is checked separately (nvcc --list-gpu-code).
var KnownArches = []string{
	"sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89",
	"sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_103a",
	"sm_110", "sm_120", "sm_121",
}

// NormalizeArch accepts "sm_90", "SM_90", "90", "9.0" (nvidia-smi's form),
// "compute_90" and returns "sm_90"; it does not validate.
func NormalizeArch(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case strings.HasPrefix(s, "sm_"):
	case strings.HasPrefix(s, "sm"):
		s = "sm_" + s[2:]
	case strings.HasPrefix(s, "compute_"):
		s = "sm_" + strings.TrimPrefix(s, "compute_")
	default:
		if maj, min, ok := strings.Cut(s, "."); ok {
			s = "sm_" + maj + min
		} else {
			s = "sm_" + s
		}
	}
	return s
}

// ParseArches normalizes, validates, de-duplicates and sorts (oldest first)
// a list of archs; entries may themselves be comma separated.
func ParseArches(list []string) ([]string, error) {
	var out []string
	for _, item := range list {
		for _, a := range strings.Split(item, ",") {
			if strings.TrimSpace(a) == "" {
				continue
			}
			n := NormalizeArch(a)
			if !slices.Contains(KnownArches, n) {
				return nil, fmt.Errorf("%w %q; valid: %s", ErrBadArch, strings.TrimSpace(a), strings.Join(KnownArches, " "))
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list; valid: %s", ErrBadArch, strings.Join(KnownArches, " "))
	}
	slices.SortFunc(out, func(a, b string) int { return archNum(a) - archNum(b) })
	return out, nil
}

// archNum: sm_90 → 900, sm_90a → 901, sm_100 → 1000.
func archNum(a string) int {
	s := strings.TrimPrefix(a, "sm_")
	suffix := 0
	if strings.HasSuffix(s, "a") {
		s, suffix = s[:len(s)-1], 1
	}
	n, _ := strconv.Atoi(s)
	return n*10 + suffix
}

// smNumber is the fatbinary/gencode form: sm_90a → "90a".
func smNumber(a string) string { return strings.TrimPrefix(a, "sm_") }

// ptxArchFor is the forward-compatible PTX target for the newest arch:
// sm_90a → "90" (arch-specific PTX would not run on later GPUs).
func ptxArchFor(newest string) string { return strings.TrimSuffix(smNumber(newest), "a") }

// archDetectors are tried in order by DetectArch; detect_nvml.go (build tag
// nvml, needs cgo and github.com/NVIDIA/go-nvml in go.mod) prepends an NVML
// probe.
var archDetectors = []func() (string, bool){detectNvidiaSMI}

// DetectArch returns the compute capability of the local GPU 0 as "sm_XX"
// and true, or DefaultArch and false when there is no GPU (or no driver).
func DetectArch() (string, bool) {
	for _, d := range archDetectors {
		if a, ok := d(); ok {
			a = NormalizeArch(a)
			if slices.Contains(KnownArches, a) {
				return a, true
			}
		}
	}
	return DefaultArch, false
}

func detectNvidiaSMI() (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader").Output()
	if err != nil {
		return "", false
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	line = strings.TrimSpace(line)
	if line == "" || strings.ContainsAny(line, " []") {
		return "", false
	}
	return line, true
}
