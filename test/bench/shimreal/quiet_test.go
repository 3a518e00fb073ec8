package main

import (
	"slices"
	"testing"
)

func TestQuietPairs(t *testing.T) {
	steals := func(v ...float64) []sample {
		ss := make([]sample, len(v))
		for i := range v {
			ss[i].steal = v[i]
		}
		return ss
	}
	for _, tc := range []struct {
		name       string
		real, shim []float64
		want       []int
	}{
		{"both quiet", []float64{0, 5}, []float64{20, 0}, []int{0, 1}},
		{"one side stolen from", []float64{0, 30}, []float64{25, 0}, nil},
		{"unknown steal is never quiet", []float64{-1, 0}, []float64{0, 0}, []int{1}},
		{"unpaired last round", []float64{0, 0, 0}, []float64{0, 0}, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := quietPairs(map[string][]sample{variantReal: steals(tc.real...), variantShim: steals(tc.shim...)}, 20)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("quietPairs = %v, want %v", got, tc.want)
			}
		})
	}
}
