package main

import (
	"strings"
	"testing"
)

// TestAgree checks that agree fails when the real Lua and the shim reached
// different backends, so the "picks agree" lines of a run mean something.
func TestAgree(t *testing.T) {
	chash := benchCase{name: "chash_canary_chash"}
	subset := benchCase{name: "chash_canary_chashsubset"}
	for _, tc := range []struct {
		name       string
		c          benchCase
		real, shim map[string]string
		n          int
		err        string // substring; "" for no error
	}{
		{"same main", chash, map[string]string{"one main /k0": "a"}, map[string]string{"one main /k0": "a"}, 1, ""},
		{"other main", chash, map[string]string{"one main /k0": "a"}, map[string]string{"one main /k0": "b"}, 1, "real Lua a, shim b"},
		{"other route", benchCase{name: "canary_header"}, map[string]string{`one X-Canary: "yes"`: "canary"}, map[string]string{`one X-Canary: "yes"`: "main"}, 1, "real Lua canary, shim main"},
		{"other canary", chash, map[string]string{"one canary /k0": "x"}, map[string]string{"one canary /k0": "y"}, 1, "real Lua x, shim y"},
		{"canary not reached on one", chash, map[string]string{"one canary /k0": "x"}, map[string]string{"one canary /k0": ""}, 0, ""},
		{"one subset", subset, map[string]string{"set canary /k0": "x y"}, map[string]string{"set canary /k0": "y"}, 1, ""},
		{"two subsets", subset, map[string]string{"set canary /k0": "x y"}, map[string]string{"set canary /k0": "z"}, 1, "more than one subset of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := agree(tc.c, tc.real, tc.shim)
			if n != tc.n || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("agree: %d, %v; want %d, error containing %q", n, err, tc.n, tc.err)
			}
		})
	}
}
