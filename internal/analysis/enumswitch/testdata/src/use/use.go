package use

import (
	"vocab"

	"other"
)

func all(c vocab.Coll) int {
	switch c {
	case vocab.Broadcast, vocab.Reduce:
		return 1
	case vocab.AllReduce:
		return 2
	}
	return 0
}

func missing(c vocab.Coll) int {
	switch c { // want `switch on vocab.Coll misses Reduce, AllReduce and has no default: add the cases, or a default that says what the others do`
	case vocab.Broadcast:
		return 1
	}
	return 0
}

func withDefault(c vocab.Coll) int {
	switch c {
	case vocab.Broadcast:
		return 1
	default:
		return 0
	}
}

func emptyDefault(c vocab.Coll) {
	switch c {
	default:
	}
}

// Aliases cover the value they name; a missing value is named by its
// first constant (Int8, not Char).
func aliases(t vocab.DataType) int {
	switch t {
	case vocab.Int, vocab.Float:
		return 4
	case vocab.Char:
		return 1
	}
	switch t { // want `switch on vocab.DataType misses Int8 and`
	case vocab.Int32, vocab.Float:
		return 4
	}
	return 0
}

// The count is no value to cover; naming it is allowed.
func counts(o vocab.RedOp) bool {
	switch o {
	case vocab.Sum, vocab.Max:
		return true
	case vocab.NumRedOps:
		return false
	}
	switch o { // want `switch on vocab.RedOp misses Max and`
	case vocab.Sum:
	}
	return false
}

func initStmt(x int) int {
	switch c := vocab.Coll(x); c { // want `switch on vocab.Coll misses Broadcast, AllReduce and`
	case vocab.Reduce:
		return int(c)
	}
	return 0
}

// A literal of the enum's value counts as that value.
func literal(c vocab.Coll) bool {
	switch c {
	case 0, 1, 2:
		return true
	}
	return false
}

// A non-constant case is not checked.
func dynamic(c, d vocab.Coll) bool {
	switch c {
	case d:
		return true
	}
	return false
}

// Tagless switches, non-enum types and unlisted packages are not checked.
func unchecked(c vocab.Coll, f vocab.Flag, n vocab.Name, l other.Level, i int) {
	switch {
	case c == vocab.Broadcast:
	}
	switch f {
	case vocab.On:
	}
	switch n {
	case vocab.A:
	}
	switch l {
	case other.Low:
	}
	switch i {
	case 1:
	}
	var v any = c
	switch v.(type) {
	case vocab.Coll:
	}
}
