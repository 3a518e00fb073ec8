//go:build !unix

package balancer

func processCPU() int64 { return -1 }
