package manifests

import (
	"bufio"
	"bytes"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }

func nowTime() metav1.Time { return metav1.Now() }

// equalIgnoringVersion reports whether a freshly decoded object equals the
// stored one, ignoring the fields Source fills in itself.
func equalIgnoringVersion(stored, fresh runtime.Object) bool {
	a := stored.DeepCopyObject()
	b := fresh.DeepCopyObject()
	am, _ := meta.Accessor(a)
	bm, _ := meta.Accessor(b)
	for _, m := range []metav1.Object{am, bm} {
		m.SetResourceVersion("")
		m.SetUID("")
		m.SetCreationTimestamp(metav1.Time{})
	}
	return equality.Semantic.DeepEqual(a, b)
}
