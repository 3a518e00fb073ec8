package picksock

import "unsafe"

// unsafeString views b as a string for the duration of a call that does not
// retain it (balancer lookups by name).
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
