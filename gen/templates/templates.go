// Package templates holds the text/template sources from which the
// generator emits CUDA and C: one file per kind of output.
package templates

import "embed"

// FS holds every template, by file name.
//
//go:embed *.tmpl
var FS embed.FS
