package numfmt

import (
	"math"

	"github.com/ncclgo/ncclgo/kspace"
)

// Overflow says what an encoder does with a value whose magnitude, once
// rounded, is beyond a format's largest finite value.
type Overflow int

const (
	// ToInf is IEEE 754's rule (and OCP FP8's non-saturating mode): the value
	// rounds to ±Inf; a format without infinities (e4m3) gives NaN instead.
	// ±Inf encode as ±Inf.
	ToInf Overflow = iota
	// SatFinite is CUDA's __NV_SATFINITE, the mode of the __nv_fp8_e4m3 and
	// __nv_fp8_e5m2 constructors that ncclgo's device code (ng_reduce.h) and
	// NCCL use: the value, ±Inf included, becomes the largest finite value of
	// its sign.
	SatFinite
)

// A Format is a binary floating-point format of at most 16 bits: a sign bit,
// Exp exponent bits and Mant mantissa bits, with subnormals.
type Format struct {
	Name string // the kspace.Type name
	Exp  int    // exponent bits
	Mant int    // mantissa (trailing significand) bits
	// FN marks OCP's "finite, NaN" variant (E4M3FN): the all-ones exponent
	// holds finite values, no infinities exist, and the only NaNs are the
	// codes with exponent and mantissa all ones.
	FN bool
}

// The formats of ncclgo's 16- and 8-bit floating-point types.
var (
	Half     = Format{Name: kspace.F16.String(), Exp: 5, Mant: 10}             // IEEE 754 binary16
	BFloat16 = Format{Name: kspace.BF16.String(), Exp: 8, Mant: 7}             // bfloat16: binary32's top half
	E4M3     = Format{Name: kspace.F8E4M3.String(), Exp: 4, Mant: 3, FN: true} // OCP FP8 E4M3 (E4M3FN): max 448, no Inf
	E5M2     = Format{Name: kspace.F8E5M2.String(), Exp: 5, Mant: 2}           // OCP FP8 E5M2: IEEE-like, max 57344
)

func (f Format) bias() int       { return 1<<(f.Exp-1) - 1 }
func (f Format) signBit() uint16 { return 1 << (f.Exp + f.Mant) }
func (f Format) expMax() int     { return 1<<f.Exp - 1 } // the all-ones exponent field

// Bits is the width of an encoding in bits.
func (f Format) Bits() int { return 1 + f.Exp + f.Mant }

// MaxCode is the encoding of the largest finite value.
func (f Format) MaxCode() uint16 {
	if f.FN {
		return uint16(f.expMax()<<f.Mant | (1<<f.Mant - 2))
	}
	return uint16((f.expMax()-1)<<f.Mant | (1<<f.Mant - 1))
}

// Max is the largest finite value (65504 for f16, 448 for e4m3).
func (f Format) Max() float64 { return f.Decode(f.MaxCode()) }

// InfCode is the encoding of +Inf, or of a positive NaN for a format without
// infinities.
func (f Format) InfCode() uint16 {
	if f.FN {
		return f.NaNCode()
	}
	return uint16(f.expMax() << f.Mant)
}

// NaNCode is the encoding of the positive quiet NaN the encoder produces:
// all-ones exponent and the top mantissa bit (all mantissa bits for FN).
func (f Format) NaNCode() uint16 {
	if f.FN {
		return uint16(f.expMax()<<f.Mant | (1<<f.Mant - 1))
	}
	return uint16(f.expMax()<<f.Mant | 1<<(f.Mant-1))
}

// IsNaN reports whether code c is a NaN.
func (f Format) IsNaN(c uint16) bool {
	mag := c &^ f.signBit()
	if f.FN {
		return mag == f.NaNCode()
	}
	return mag > f.InfCode()
}

// Decode returns the value of code c; ±Inf and NaN codes give ±Inf and a
// NaN of the code's sign.
func (f Format) Decode(c uint16) float64 {
	mag := c &^ f.signBit()
	neg := c&f.signBit() != 0
	if f.IsNaN(c) {
		if neg {
			return math.Copysign(math.NaN(), -1)
		}
		return math.NaN()
	}
	if !f.FN && mag == f.InfCode() {
		if neg {
			return math.Inf(-1)
		}
		return math.Inf(1)
	}
	exp := int(mag >> f.Mant)
	sig := int64(mag & (1<<f.Mant - 1))
	if exp == 0 {
		exp = 1 // subnormal: no implicit bit, the smallest exponent
	} else {
		sig |= 1 << f.Mant
	}
	v := math.Ldexp(float64(sig), exp-f.bias()-f.Mant)
	if neg {
		v = -v
	}
	return v
}

// Encode rounds v to the nearest value of f, ties to even (the value whose
// code is even), and returns its code. NaN encodes as a quiet NaN of v's
// sign, zeros keep their sign, and values beyond the largest finite one
// (after rounding) follow o. A float32 is encoded exactly as its float64
// value: the conversion to float64 is exact, so there is no double rounding.
func (f Format) Encode(v float64, o Overflow) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign, v = f.signBit(), -v
	}
	switch {
	case math.IsNaN(v):
		return sign | f.NaNCode()
	case math.IsInf(v, 0):
		return sign | f.overflow(o)
	case v == 0:
		return sign
	}
	// v = frac * 2^e with frac in [0.5, 1): the leading bit has weight
	// 2^(e-1). Scale v so that the format's last mantissa bit has weight 1,
	// round to an integer (exact in float64: scaling by a power of two), and
	// the integer is the code's exponent-and-mantissa field.
	_, e := math.Frexp(v)
	lead := e - 1
	minExp := 1 - f.bias()
	if lead < minExp {
		lead = minExp // subnormal: the quantum is fixed
	}
	n := math.RoundToEven(math.Ldexp(v, f.Mant-lead))
	// n is in [2^Mant, 2^(Mant+1)] for normals (its top bit the implicit
	// one), in [0, 2^Mant] for subnormals. The code (lead-minExp)<<Mant + n
	// is then exponent field lead+bias over mantissa n-2^Mant for normals and
	// n for subnormals; the addition carries a mantissa that rounded up to
	// 2^(Mant+1) into the next exponent and a subnormal that rounded up to
	// 2^Mant into the smallest normal. It stays in float64 until the range
	// check: lead can be 1023.
	code := math.Ldexp(float64(lead-minExp), f.Mant) + n
	if code > float64(f.MaxCode()) {
		return sign | f.overflow(o)
	}
	return sign | uint16(code)
}

func (f Format) overflow(o Overflow) uint16 {
	if o == SatFinite {
		return f.MaxCode()
	}
	return f.InfCode()
}
