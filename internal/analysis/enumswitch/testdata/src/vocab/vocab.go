// Package vocab declares enums as kspace and ncclgo do.
package vocab

// Coll is an enum with a count that is no value.
type Coll int

const (
	Broadcast Coll = iota
	Reduce
	AllReduce
	NumColls = iota
)

// DataType has aliases and a typed, unexported count.
type DataType int

const (
	Int8 DataType = iota
	Int32
	Float32
	numDataTypes
)

const (
	Char  = Int8
	Int   = Int32
	Float = Float32
)

// RedOp has a typed exported count: values from NumRedOps up are user ops.
type RedOp int

const (
	Sum RedOp = iota
	Max
	NumRedOps
)

// Flag has one value only: no enum.
type Flag int

const On Flag = 1

// Name is a string type: no enum.
type Name string

const (
	A Name = "a"
	B Name = "b"
)

func (c Coll) String() string {
	switch c { // want `switch on Coll misses AllReduce and has no default`
	case Broadcast:
		return "Broadcast"
	case Reduce:
		return "Reduce"
	}
	return "?"
}

func (t DataType) valid() bool { return t >= 0 && t < numDataTypes }
