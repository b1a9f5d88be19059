// Package envmap gives tests an environment lookup made from name/value
// pairs, in the shape of os.Getenv, for functions that read their settings
// through an injected lookup.
package envmap

// Getenv returns a lookup that answers each name of the pairs kv (name,
// value, name, value, ...) with its value, and every other name with "".
// A name given twice answers with its first value.
func Getenv(kv ...string) func(string) string {
	if len(kv)%2 != 0 {
		panic("envmap.Getenv: an odd number of strings (want name, value pairs)")
	}
	return func(k string) string {
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}
