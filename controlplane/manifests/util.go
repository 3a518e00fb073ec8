package manifests

import (
	"bufio"
	"bytes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }

func nowTime() metav1.Time { return metav1.Now() }
