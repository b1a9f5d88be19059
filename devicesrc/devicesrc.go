// Package devicesrc holds ncclgo's hand-written CUDA device library (the
// headers that every generated translation unit includes) and embeds it,
// so that `ncclgen build` can compile a kernel set from any directory —
// a user's module, with ncclgo read-only in the module cache — by
// writing these headers next to the sources it generates.
package devicesrc

import "embed"

// FS holds every header of the device library, by file name.
//
//go:embed *.h
var FS embed.FS
