package main

import (
	"flag"
	"strconv"
	"sync"

	"k8s.io/klog/v2"
)

var (
	klogOnce sync.Once
	klogFS   *flag.FlagSet
)

// klogFlags sets klog's verbosity from -v. klog's flags live in one private
// FlagSet, registered once.
func klogFlags(v int) {
	klogOnce.Do(func() {
		klogFS = flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(klogFS)
	})
	_ = klogFS.Set("v", strconv.Itoa(v))
}
