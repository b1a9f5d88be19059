// Package other declares an enum in a package -pkgs does not list.
package other

type Level int

const (
	Low Level = iota
	High
)
